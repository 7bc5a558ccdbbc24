# SPDX-License-Identifier: GPL-2.0
"""Results as data: make report runs from the committed records alone, the
committed docs/results.md and its plots are what it makes of them, and
every figure of the README's results is the field of a committed record
that its row and column name, or says that it has none."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TOP

from asyncfork import bench_fork, report, results

README = TOP / "README.md"
DOCS = TOP / "docs"
NO_RECORD = "no committed record"


def run_report(tmp_path):
    """make report's command into tmp_path, with a build folder that does
    not exist: nothing but the committed records may be read."""
    env = dict(os.environ, ASYNCFORK_BUILD=str(tmp_path / "no-build"),
               PYTHONPATH=str(TOP / "python"))
    p = subprocess.run([sys.executable, "-m", "asyncfork", "report", "--markdown",
                        str(tmp_path / "results.md"), "--plots", str(tmp_path / "plots")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    assert not (tmp_path / "no-build").exists()
    return (tmp_path / "results.md").read_text(), sorted(
        f.name for f in (tmp_path / "plots").glob("*.png"))


def test_report_runs_from_the_committed_records_and_is_up_to_date(tmp_path):
    text, made = run_report(tmp_path)
    assert text == (DOCS / "results.md").read_text(), \
        "docs/results.md is not what make report makes of docs/results/*.json: run make report"
    assert made == sorted(f.name for f in (DOCS / "results/plots").glob("*.png")), \
        "docs/results/plots/ differs from what make report draws: run make report"
    # Every record committed has its section, linked to it.
    for f in (DOCS / "results").glob("*.json"):
        assert f"(results/{f.name})" in text, f.name


def test_every_figure_of_results_md_comes_from_a_record():
    text = (DOCS / "results.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert images, "docs/results.md shows no plot"
    stems = [f.stem for f in (DOCS / "results").glob("*.json")]
    for img in images:
        assert img.startswith("results/plots/") and (DOCS / img).is_file(), img
        # A plot is named after the record it is drawn from.
        assert any(Path(img).stem.startswith(s) for s in stems), img
    for link in re.findall(r"\]\((results/[^)]+\.json)\)", text):
        assert (DOCS / link).is_file(), link


def mode_of(column: str) -> str | None:
    """The mode a results column's header names: "default" or "async"."""
    c = column.lower()
    if "default" in c:
        return "default"
    if "async" in c:
        return "async"
    return None


def at_key(record: dict, label: str, mode: str) -> tuple[str, float | None]:
    """(key, value in ms) of the field of a record that a README row (its
    label) and column (its mode) name; value None: the record has no such
    field.  A bench-fork row names its size ("512 MiB"), its pages ("4 KiB"
    or THP) and its copy threads ("2 copy threads"; 1 if not said): the
    median fork() time of that mode.  A demo row names the slowest request
    of the snapshot window ("slowest request": snapshot.max_ms) or else the
    fork() time (fork_ms, or fork_us in us)."""
    if "medians" in record:
        size = re.search(r"(\d+) MiB", label)
        threads = re.search(r"(\d+) copy threads?", label)
        thp = "THP" in label or "2 MiB pages" in label
        ct = int(threads.group(1)) if threads else 1
        if not size:
            return "medians[?]", None
        key = (f"medians[size_mb={size.group(1)}, thp={thp}, async={mode == 'async'}"
               + (f", copy_threads={ct}" if mode == "async" else "") + "].fork_ms")
        for m in record["medians"]:
            if m["size_mb"] == int(size.group(1)) and m["thp"] == thp and \
                    m["async"] == (mode == "async") and \
                    (mode != "async" or m.get("copy_threads") == ct):
                return key, m["fork_ms"]
        return key, None
    if "modes" in record:
        m = record["modes"].get(mode, {})
        if "slowest request" in label:
            return f"modes.{mode}.snapshot.max_ms", m.get("snapshot", {}).get("max_ms")
        if "fork_ms" in m:
            return f"modes.{mode}.fork_ms", m["fork_ms"]
        return f"modes.{mode}.fork_us", m["fork_us"] / 1e3 if "fork_us" in m else None
    return "?", None


def unbacked(readme: str, top: Path) -> list[str]:
    """The figures of a README's results section that come from no
    committed record and do not say so: a table row's numbers must each be
    the field of the record its "data" cell links that the row's label and
    the cell's column name (at_key(), at the precision shown), a ratio the
    ratio of the row's default and Async-fork fields, and a row that says
    "exact" must have every mode's RDB exact; a row without a record says
    "no committed record"; an image is a plot make report drew
    (docs/results/plots/), or the line after it says "no committed record"."""
    section = readme.split("## Results", 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    bad = []
    for i, line in enumerate(lines):
        m = re.match(r"!\[[^\]]*\]\(([^)]+)\)", line)
        if m and not m.group(1).startswith("docs/results/plots/") and \
                NO_RECORD not in " ".join(lines[i + 1:i + 2]).lower():
            bad.append(f"plot {m.group(1)}: from no record, and not said")
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in lines if line.startswith("|") and not line.startswith("| ---")]
    if not rows:
        return bad + ["no results table"]
    header, rows = rows[0], rows[1:]
    if header[-1] != "data":
        return bad + ["the results table has no data column"]
    for row in rows:
        data = row[-1]
        link = re.search(r"\]\((docs/results/[^)]+\.json)\)", data)
        if not link:
            if NO_RECORD not in data.lower():
                bad.append(f"row '{row[0]}': no record linked, and not said")
            continue
        path = top / link.group(1)
        if not path.is_file():
            bad.append(f"row '{row[0]}': {link.group(1)} is not committed")
            continue
        record = json.loads(path.read_text())
        keyed = {mode: at_key(record, row[0], mode) for mode in ("default", "async")}
        for column, cell in zip(header[1:-1], row[1:-1]):
            mode = mode_of(column)
            if "exact" in cell.lower():
                wrong = [m for m, t in record.get("modes", {}).items()
                         if t.get("rdb_exact") is not True]
                if wrong or not record.get("modes"):
                    bad.append(f"row '{row[0]}': says exact, but {link.group(1)} has "
                               f"rdb_exact not true for {', '.join(wrong) or 'no mode'}")
            for num in re.findall(r"\d+(?:\.\d+)?", cell):
                places = len(num.split(".")[1]) if "." in num else 0
                target = float(num)
                if mode:
                    value = keyed[mode][1]
                    if value is None or round(value, places) != target:
                        bad.append(f"row '{row[0]}': {num} is not in {link.group(1)}")
                elif column.lower() == "ratio":
                    (_, d), (_, a) = keyed["default"], keyed["async"]
                    if not (d and a and round(d / a, places) == target):
                        bad.append(f"row '{row[0]}': ratio {num} is not "
                                   f"{keyed['default'][0]} / {keyed['async'][0]}")
                else:
                    bad.append(f"row '{row[0]}': {num} in column '{column}', "
                               "which names no field of a record")
    return bad


def test_readme_results_come_from_committed_records():
    assert not unbacked(README.read_text(), TOP)


def test_readme_results_all_have_a_record():
    # Every headline figure links its committed record: none says it has none.
    text = README.read_text().split("## Results", 1)[1].split("\n## ", 1)[0]
    assert NO_RECORD not in text.lower()


def test_an_unbacked_figure_is_caught(tmp_path):
    rec = tmp_path / "docs/results/demo-redis-2026-01-01.json"
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps({"modes": {"default": {"fork_ms": 476.14},
                                         "async": {"fork_us": 14630}}}))
    table = "| run | default | async | ratio | data |\n| --- | --- | --- | --- | --- |\n"
    head = "## Results\n\n" + table
    good = ("| demo | 476.14 ms | 14.63 ms | 33x | "
            "[record](docs/results/demo-redis-2026-01-01.json) |\n")
    assert unbacked(head + good, tmp_path) == []
    wrong = good.replace("476.14", "476.15").replace("33x", "")
    assert unbacked(head + wrong, tmp_path) == [
        "row 'demo': 476.15 is not in docs/results/demo-redis-2026-01-01.json"]
    assert unbacked(head + "| demo | 1 ms | 2 ms | | |\n", tmp_path) == [
        "row 'demo': no record linked, and not said"]
    assert unbacked(head + "| demo | 1 ms | 2 ms | | no committed record |\n", tmp_path) == []
    assert unbacked("## Results\n\n![p](docs/results/x.png)\n\n" + table + good, tmp_path) == [
        "plot docs/results/x.png: from no record, and not said"]
    assert unbacked("## Results\n\n![p](docs/results/x.png)\n*No committed record.*\n\n" +
                    table + good, tmp_path) == []


def test_a_figure_at_another_key_is_caught(tmp_path):
    # Every figure below is somewhere in its record, but not where its row
    # and column say: the guard checks each at its key.
    res = tmp_path / "docs/results"
    res.mkdir(parents=True)
    (res / "demo-redis-2026-01-01.json").write_text(json.dumps({"modes": {
        "default": {"fork_ms": 476.14, "snapshot": {"max_ms": 510.0}, "rdb_exact": True},
        "async": {"fork_ms": 14.63, "snapshot": {"max_ms": 40.0}, "rdb_exact": False}}}))
    (res / "bench-fork-2026-01-01.json").write_text(json.dumps({"medians": [
        {"size_mb": 512, "thp": False, "async": False, "copy_threads": None, "fork_ms": 29.03},
        {"size_mb": 512, "thp": False, "async": True, "copy_threads": 1, "fork_ms": 1.04},
        {"size_mb": 512, "thp": False, "async": True, "copy_threads": 2, "fork_ms": 0.96},
        {"size_mb": 1024, "thp": False, "async": False, "copy_threads": None,
         "fork_ms": 51.21},
        {"size_mb": 1024, "thp": False, "async": True, "copy_threads": 1, "fork_ms": 1.33}]}))
    head = ("## Results\n\n| run | default `fork()` | Async-fork `fork()` | ratio | snapshot | "
            "data |\n| --- | --- | --- | --- | --- | --- |\n")
    demo = "[d](docs/results/demo-redis-2026-01-01.json)"
    fork = "[f](docs/results/bench-fork-2026-01-01.json)"
    good = (f"| demo, 2 GiB | 476.14 ms | 14.63 ms | 33x | | {demo} |\n"
            f"| demo: slowest request | 510.00 ms | 40.00 ms | | | {demo} |\n"
            f"| forkbench, 512 MiB | 29.03 ms | 1.04 ms | 28x | | {fork} |\n"
            f"| forkbench, 512 MiB, 2 copy threads | 29.03 ms | 0.96 ms | 30x | | {fork} |\n")
    assert unbacked(head + good, tmp_path) == []
    wrong = (f"| demo, 2 GiB | 14.63 ms | 476.14 ms | | | {demo} |\n"
             f"| demo: slowest request | 476.14 ms | 40.00 ms | 12x | | {demo} |\n"
             f"| demo, exact | | | | exact both ways | {demo} |\n"
             f"| forkbench, 1024 MiB | 29.03 ms | 1.04 ms | | | {fork} |\n"
             f"| forkbench, 512 MiB | 29.03 ms | 0.96 ms | 1024 MiB | | {fork} |\n")
    d, f = "docs/results/demo-redis-2026-01-01.json", "docs/results/bench-fork-2026-01-01.json"
    assert unbacked(head + wrong, tmp_path) == [
        f"row 'demo, 2 GiB': 14.63 is not in {d}",
        f"row 'demo, 2 GiB': 476.14 is not in {d}",
        f"row 'demo: slowest request': 476.14 is not in {d}",
        "row 'demo: slowest request': ratio 12 is not modes.default.snapshot.max_ms / "
        "modes.async.snapshot.max_ms",
        f"row 'demo, exact': says exact, but {d} has rdb_exact not true for async",
        f"row 'forkbench, 1024 MiB': 29.03 is not in {f}",
        f"row 'forkbench, 1024 MiB': 1.04 is not in {f}",
        f"row 'forkbench, 512 MiB': 0.96 is not in {f}",
        "row 'forkbench, 512 MiB': ratio 1024 is not "
        "medians[size_mb=512, thp=False, async=False].fork_ms / "
        "medians[size_mb=512, thp=False, async=True, copy_threads=1].fork_ms"]
    other = head.replace("| snapshot |", "| notes |")
    assert unbacked(other + f"| demo, 2 GiB | 476.14 ms | 14.63 ms | | 2 GiB | {demo} |\n",
                    tmp_path) == ["row 'demo, 2 GiB': 2 in column 'notes', which names no "
                                  "field of a record"]


DIRTY_SAID = "from a tree with uncommitted changes"


def record_commit(record: dict) -> str | None:
    """The commit a record names (records before SCHEMA 1: meta.project)."""
    return record.get("commit") or record.get("meta", {}).get("project")


def dirty_unsaid(text: str, doc: Path, top: Path) -> list[str]:
    """The records of docs/results/ that a document links and that name a
    commit of a tree with uncommitted changes ("-dirty") without the text
    right after the link (up to the next link or the paragraph's end) saying
    so."""
    bad = []
    for m in re.finditer(r"\]\(([^)]*results/[^)]+\.json)\)", text):
        path = (doc.parent / m.group(1)).resolve()
        if not path.is_file():
            path = (top / m.group(1)).resolve()
        if not path.is_file():
            continue
        commit = record_commit(json.loads(path.read_text())) or ""
        if not commit.endswith("-dirty"):
            continue
        after = text[m.end():].split("\n\n", 1)[0].split("](", 1)[0][:300]
        if DIRTY_SAID not in " ".join(after.split()):
            bad.append(f"{doc.name}: {m.group(1)} ({commit}) is cited without "
                       f"'{DIRTY_SAID}'")
    return bad


def cited_docs() -> list[Path]:
    return [README] + sorted((DOCS / "findings").glob("*.md"))


def test_cited_records_of_dirty_trees_say_so():
    bad = [b for d in cited_docs() for b in dirty_unsaid(d.read_text(), d, TOP)]
    assert not bad, "\n".join(bad)


def test_a_dirty_record_cited_silently_is_caught(tmp_path):
    res = tmp_path / "docs/results"
    res.mkdir(parents=True)
    (res / "demo-a.json").write_text(json.dumps({"commit": "abc1234-dirty"}))
    (res / "demo-b.json").write_text(json.dumps({"commit": "abc1234"}))
    (res / "old.json").write_text(json.dumps({"meta": {"project": "abc1234-dirty"}}))
    doc = tmp_path / "docs/findings/x.md"
    doc.parent.mkdir()
    said = f"[a](../results/demo-a.json) ({DIRTY_SAID}), [b](../results/demo-b.json)"
    assert dirty_unsaid(said, doc, tmp_path) == []
    # The mark must follow its own link, not a later one's.
    late = f"[a](../results/demo-a.json), [b](../results/demo-b.json) ({DIRTY_SAID})"
    assert dirty_unsaid(late, doc, tmp_path) == [
        f"x.md: ../results/demo-a.json (abc1234-dirty) is cited without '{DIRTY_SAID}'"]
    assert len(dirty_unsaid("[o](../results/old.json) at abc1234", doc, tmp_path)) == 1
    readme = tmp_path / "README.md"
    assert len(dirty_unsaid("[a](docs/results/demo-a.json)\n\n" + DIRTY_SAID, readme,
                            tmp_path)) == 1


def test_report_draws_a_bench_fork_record(tmp_path):
    # A bench-fork run's record, as bench_fork.report() writes it from its
    # files, rendered by make report's code: its medians are in the page.
    out = tmp_path / "fork"
    out.mkdir()
    meta = {**results.metadata("bench-fork", kernels=[results.kernel(None)],
                               machine_info=results.machine(), argv=[], args={},
                               started=1795600000.0),
            "seconds": 60.0, "sizes_mb": [512, 1024], "repeat": 1, "copy_threads": [1, 2]}
    (out / "meta.json").write_text(json.dumps(meta))
    rows = []
    for s in (512, 1024):
        for thp in (False, True):
            rows.append({"size_mb": s, "thp": thp, "async": False, "fork_us": 50.0 * s,
                         "child_us": 60.0 * s})
            for t in (1, 2):
                rows.append({"size_mb": s, "thp": thp, "async": True, "copy_threads": t,
                             "fork_us": 2000.0, "child_us": 30.0 * s / t})
    (out / "forkbench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert bench_fork.report(out, tmp_path / "rec") == 0
    path, = (tmp_path / "rec").glob("bench-fork-*.json")
    text, pngs = report.render(report.load(tmp_path / "rec"), tmp_path / "plots")
    assert "| 1 GiB | 4 KiB | 51.20 | 2.000 | 26x | 61.44 | 30.72 |" in text
    assert f"(results/{path.name})" in text
    assert [p.name for p in pngs] == [f"{path.stem}-copy-threads.png",
                                      f"{path.stem}-fork-vs-size.png"]


@pytest.mark.parametrize("kind", ["nonsense"])
def test_a_json_that_is_no_record_is_refused(tmp_path, kind):
    (tmp_path / "x.json").write_text(json.dumps({"kind": kind}))
    with pytest.raises(SystemExit, match="not a record"):
        report.load(tmp_path)


def test_readme_is_a_front_page():
    assert len(README.read_text().splitlines()) < 150


def test_report_draws_a_test_deb_record(tmp_path):
    # make test-deb's record (asyncfork.test_deb): the package's kernel
    # from its image, its config hash from the package's config file.
    boot = tmp_path / "root/boot"
    boot.mkdir(parents=True)
    release = "6.12.117-asyncfork-cloud-amd64"
    (boot / f"vmlinuz-{release}").write_bytes(b"MZ")
    (boot / f"config-{release}").write_text("CONFIG_ASYNC_FORK=y\n")
    k = results.kernel(image=boot / f"vmlinuz-{release}", label="cloud-amd64",
                       async_fork="set by each program")
    assert k["release"] == release and k["flavour"] == "cloud-amd64"
    assert k["config_sha256"] == results.file_sha256(boot / f"config-{release}")
    rec = {**results.metadata("test-deb", kernels=[k], machine_info=results.machine(3, "4G", 2,
                                                                                    "zram"),
                              argv=["--flavour", "cloud-amd64"], args={}, started=1795600000.0),
           "package": "linux-image-x.deb", "package_version": "1", "package_sha256": "ab" * 32,
           "flavour": "cloud-amd64", "seconds": 300.0, "passed": True,
           "boots": {"defaults": {"kernel": release, "seconds": 120.0, "kernel_reports": 0,
                                  "passed": True, "programs": {"fork_snapshot": {
                                      "passed": True, "seconds": 20.0, "problems": []}}}}}
    path = results.write(rec, tmp_path / "rec", "test-deb-cloud-amd64")
    text, _ = report.render(report.load(tmp_path / "rec"), tmp_path / "plots")
    assert f"| defaults | {release} | yes | 120 | 0 | - |" in text
    assert f"| cloud-amd64 | {release} | {k['config_sha256'][:12]} | " in text
    assert f"(results/{path.name})" in text


def test_where_says_an_emulated_architecture():
    from asyncfork import report
    m = {"where": "vm", "machine": {"accel": "tcg", "guest_cpus": 2, "guest_memory": "4G",
                                    "host_cpu": "X", "host_cpus": 2}}
    assert report.where_text(m).startswith("a QEMU guest under TCG")
    m["machine"].update(arch="arm64", emulated_arch=True)
    assert report.where_text(m).startswith("an emulated arm64 guest under TCG")
