# SPDX-License-Identifier: GPL-2.0
"""make check-kernel's record: what it reads from scripts/check-kernel.sh's
logs, and how the report shows it."""

import json

from asyncfork import check_kernel, report, results

LOG = """\
check-kernel: 6.12.117 + 26 patches (/x/kernel/patches), -j2, into /x/build/check-kernel
check-kernel: [kdoc] 05:05:04
check-kernel: kdoc: no new warning
check-kernel: [kdoc] passed
check-kernel: [sparse] 05:20:00
    mm/async_fork.c:1326:33: warning: incorrect type in argument 1
check-kernel: [sparse] FAILED: new warnings (/x/build/check-kernel/sparse.log)
check-kernel: [tiny] 05:30:00
check-kernel: [tiny] passed
check-kernel: failed: sparse (of kdoc sparse tiny) in 36 min 17 s; log /x/check-kernel.log
"""


def test_parse_log_reads_every_verdict_and_the_length():
    p = check_kernel.parse_log(LOG)
    assert (p["kernelversion"], p["patches"], p["jobs"]) == ("6.12.117", 26, 2)
    assert p["checks"] == {
        "kdoc": {"verdict": "passed", "why": None},
        "sparse": {"verdict": "failed", "why": "new warnings (/x/build/check-kernel/sparse.log)"},
        "tiny": {"verdict": "passed", "why": None}}
    assert p["seconds"] == 36 * 60 + 17 and p["finished"]


def test_a_check_cut_short_is_unfinished_and_the_run_did_not_pass(tmp_path):
    cut = "\n".join(LOG.splitlines()[:8]) + "\n"
    p = check_kernel.parse_log(cut)
    assert p["checks"]["tiny"]["verdict"] == "unfinished" and not p["finished"]
    (tmp_path / "check-kernel.log").write_text(cut)
    rec = check_kernel.record(tmp_path, ["asyncfork", "check-kernel"])
    assert not rec["passed"] and not rec["finished"]


def test_record_names_the_new_warnings_and_fails(tmp_path):
    (tmp_path / "check-kernel.log").write_text(LOG)
    (tmp_path / "sparse.new").write_text("mm/async_fork.c: warning: incorrect type\n\n")
    rec = check_kernel.record(tmp_path, ["asyncfork", "check-kernel", "--record-only"])
    assert rec["kind"] == "check-kernel" and results.kind_of(rec) == "check-kernel"
    assert rec["kernel"] == "6.12.117 + 26 patches"
    assert not rec["passed"]
    by = {c["check"]: c for c in rec["checks"]}
    assert by["sparse"]["new_warnings"] == ["mm/async_fork.c: warning: incorrect type"]
    assert by["kdoc"]["new_warnings"] == [] and by["kdoc"]["verdict"] == "passed"
    # A record as written is one the report knows.
    path = results.write(json.loads(json.dumps(rec, default=str)), tmp_path, "check-kernel")
    loaded = report.load(tmp_path)
    assert [p for p, _ in loaded] == [path]
    text = "\n".join(report.check_kernel_section(rec, "x", tmp_path))
    assert text.startswith("FAILED: 6.12.117 + 26 patches, 3 checks.")
    assert "| sparse | failed | 1 |" in text


def test_all_passed_is_a_pass(tmp_path):
    log = LOG.replace("check-kernel: [sparse] FAILED: new warnings (/x/build/check-kernel/"
                      "sparse.log)", "check-kernel: [sparse] passed")
    (tmp_path / "check-kernel.log").write_text(log)
    assert check_kernel.record(tmp_path, ["asyncfork", "check-kernel"])["passed"]


def test_no_log_is_a_clear_error(tmp_path, capsys):
    assert check_kernel.main(["--build", str(tmp_path), "--record-only"]) == 2
    assert "run make check-kernel" in capsys.readouterr().err
