# SPDX-License-Identifier: GPL-2.0
"""The bases scripts/fetch-base.sh makes from Debian's archive (kernel/bases/).

The pins are checked here without a network; the fetched tree (make's
BUILD/bases/) by the slow tests, which skip when it is not fetched.  They
recompute, independently of the script (Python for git's tree hashes,
where the script uses git), that the tarball is the tree the pin names,
that it is Linux VERSION, that it differs from Debian's tree exactly in
the files of the patches it reverted, and that the method gives the
vanilla orig tarball byte for byte on the pin's calibration release.
"""

import functools
import hashlib
import os
import re
import subprocess
import tarfile

import pytest

from conftest import BUILD, TOP

PINS = TOP / "kernel/bases"
SCRIPT = TOP / "scripts/fetch-base.sh"
BASES = sorted(p.name for p in PINS.iterdir() if p.is_file() and not p.name.endswith(".md"))
SHA256 = re.compile(r"[0-9a-f]{64}")
GIT_TREE = re.compile(r"[0-9a-f]{40}")


def load(path):
    """{key: [values]} of a key=value file (a pin or a record)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def one(kv, key):
    assert len(kv.get(key, [])) == 1, f"needs exactly one {key}="
    return kv[key][0]


def pin(base):
    return load(PINS / base)


def route_bases(route):
    return [b for b in BASES if one(pin(b), "route") == route]


# -- the pins, no network --------------------------------------------------

REQUIRED = {
    "orig": ["version", "tag", "orig_suite", "orig_source_version", "orig_dsc",
             "orig_dsc_sha256", "orig_tarball", "orig_sha256", "result_tree"],
    "debian-revert": [
        "version", "tag", "tree_suite", "tree_index", "tree_package", "tree_version",
        "tree_deb", "tree_deb_sha256", "tree_member", "tree_member_sha256", "tree_copyright",
        "patches_suite", "patches_source", "patches_version", "patches_dsc",
        "patches_dsc_sha256", "patches_debian", "patches_debian_sha256",
        "calibrate_suite", "calibrate_version", "calibrate_tree_package",
        "calibrate_tree_version", "calibrate_tree_deb", "calibrate_tree_deb_sha256",
        "calibrate_tree_member", "calibrate_tree_member_sha256", "calibrate_source_version",
        "calibrate_orig", "calibrate_orig_sha256", "result_tree", "calibrate_tree"],
}


def test_there_is_a_pin_for_7_3():
    assert "7.3" in BASES


@pytest.mark.parametrize("base", BASES)
def test_pin_is_complete(base):
    p = pin(base)
    route = one(p, "route")
    assert route in REQUIRED, f"kernel/bases/{base}: unknown route={route}"
    for key in REQUIRED[route]:
        value = one(p, key)
        if key.endswith("sha256"):
            assert SHA256.fullmatch(value), f"{key}={value}"
        if key in ("result_tree", "calibrate_tree"):
            assert GIT_TREE.fullmatch(value), f"{key}={value}: pin the tree fetch-base.sh made"
    version = one(p, "version")
    assert version.startswith(base + ".") and one(p, "tag") == f"v{version}"
    for key in ("tree_deb", "patches_dsc", "patches_debian", "calibrate_tree_deb",
                "calibrate_orig", "orig_dsc", "orig_tarball"):
        if key in p:
            assert one(p, key).startswith("pool/main/l/linux/"), key


def run_script(*args):
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def test_unknown_base_is_refused(tmp_path):
    r = run_script("9.9", tmp_path)
    assert r.returncode == 1
    assert "unknown BASE '9.9'" in r.stderr and "known: 6.12 7.3" in r.stderr, r.stderr
    r = run_script("../7.3", tmp_path)
    assert r.returncode == 1 and "unknown BASE" in r.stderr, r.stderr


def test_base_6_12_is_not_fetched(tmp_path):
    r = run_script("6.12", tmp_path)
    assert r.returncode == 1 and "make setup" in r.stderr, r.stderr
    assert not (tmp_path / "bases").exists()


# -- the fetched tree --------------------------------------------------------

def fetched(base):
    """(tarball, record) of BUILD/bases, or skip when BASE is not fetched."""
    tarball = BUILD / f"bases/linux-{base}.tar.xz"
    record = BUILD / f"bases/linux-{base}.record"
    if not (tarball.exists() and record.exists()):
        pytest.skip(f"BASE={base} is not fetched: run scripts/fetch-base.sh {base} {BUILD}")
    rec = load(record)
    if one(rec, "inputs_sha256") != inputs_sha256(base):
        pytest.fail(f"{record} was made with another kernel/bases/{base}: "
                    f"run scripts/fetch-base.sh {base} {BUILD} again")
    assert one(rec, "tarball_sha256") == sha256(tarball), f"{tarball} changed since it was made"
    return tarball, rec


def inputs_sha256(base):
    """What fetch-base.sh records as the inputs of BASE: the sha256 of its
    pin less comments, blank lines and the trees it expects."""
    lines = (PINS / base).read_text().splitlines()
    kept = [line for line in lines if line and not line.startswith(
        ("#", "result_tree=", "calibrate_tree="))]
    return hashlib.sha256("".join(line + "\n" for line in kept).encode()).hexdigest()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).digest()


@functools.cache
def manifest(tarball):
    """{path below the top folder: (git mode, git blob id)} of a tarball,
    and its top folder."""
    files, tops = {}, set()
    with tarfile.open(tarball, "r|xz") as t:
        for m in t:
            top, _, path = m.name.partition("/")
            tops.add(top)
            if m.isreg():
                files[path] = ("100755" if m.mode & 0o100 else "100644",
                               blob(t.extractfile(m).read()))
            elif m.issym():
                files[path] = ("120000", blob(m.linkname.encode()))
            elif m.islnk():
                files[path] = files[m.linkname.partition("/")[2]]
    assert len(tops) == 1, f"{tarball}: not one top folder: {sorted(tops)[:5]}"
    return files, tops.pop()


def tree_manifest(root):
    """The same for a folder on disk."""
    files = {}
    for d, dirs, names in os.walk(root):
        for n in names + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                files[rel] = ("120000", blob(os.readlink(p).encode()))
            else:
                with open(p, "rb") as f:
                    files[rel] = ("100755" if os.stat(p).st_mode & 0o100 else "100644",
                                  blob(f.read()))
    return files


def git_tree(files):
    """git's tree id of {path: (mode, blob id)}, as git write-tree gives it."""
    root = {}
    for path, entry in files.items():
        *dirs, name = path.split("/")
        d = root
        for x in dirs:
            d = d.setdefault(x, {})
        d[name] = entry

    def write(d):
        items = []
        for name, v in d.items():
            if isinstance(v, dict):
                items.append(((name + "/").encode(), b"40000 %s\0%s" % (name.encode(), write(v))))
            else:
                items.append((name.encode(), b"%s %s\0%s" % (v[0].encode(), name.encode(), v[1])))
        body = b"".join(e for _, e in sorted(items))
        return hashlib.sha1(b"tree %d\0" % len(body) + body).digest()

    return write(root).hex()


def test_git_tree_matches_git(tmp_path):
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "a/b/c.txt").write_text("c\n")
    (tmp_path / "a.sh").write_text("#!/bin/sh\n")
    (tmp_path / "a.sh").chmod(0o755)
    (tmp_path / "a-b").write_text("x")
    (tmp_path / "l").symlink_to("a/b/c.txt")
    env = {**os.environ, "GIT_DIR": str(tmp_path / ".g"), "GIT_WORK_TREE": str(tmp_path),
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], env=env, check=True)
    subprocess.run(["git", "add", "-A", "-f", "a", "a.sh", "a-b", "l"], env=env, check=True)
    want = subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    files = {k: v for k, v in tree_manifest(tmp_path).items() if not k.startswith(".g/")}
    assert git_tree(files) == want


def makefile_version(text):
    fields = dict(re.findall(r"^(VERSION|PATCHLEVEL|SUBLEVEL|EXTRAVERSION) =[ \t]*(.*)$",
                             text, re.M))
    return "{VERSION}.{PATCHLEVEL}.{SUBLEVEL}{EXTRAVERSION}".format(**fields)


def member_text(tarball, path):
    with tarfile.open(tarball, "r|xz") as t:
        for m in t:
            if m.name.partition("/")[2] == path:
                return t.extractfile(m).read().decode()
    raise AssertionError(f"{tarball} has no {path}")


@pytest.mark.slow
@pytest.mark.parametrize("base", BASES)
def test_fetched_tree_is_the_pinned_version_and_tree(base):
    tarball, rec = fetched(base)
    p = pin(base)
    version = one(p, "version")
    files, top = manifest(tarball)
    assert top == f"linux-{version}"
    assert len(files) > 50000
    assert makefile_version(member_text(tarball, "Makefile")) == version
    tree = git_tree(files)
    assert tree == one(rec, "tree") == one(p, "result_tree")


@pytest.mark.slow
@pytest.mark.parametrize("base", route_bases("orig"))
def test_fetched_tarball_is_the_orig_tarball(base):
    tarball, _ = fetched(base)
    assert sha256(tarball) == one(pin(base), "orig_sha256")


def downloads(base):
    """{pin key: cached download} for the sums a debian-revert pin gives."""
    p, d = pin(base), BUILD / "bases/downloads"
    return {
        "tree_deb_sha256": d / os.path.basename(one(p, "tree_deb")),
        "tree_member_sha256": d / f"{one(p, 'tree_package')}_{one(p, 'tree_version')}.tar.xz",
        "patches_dsc_sha256": d / os.path.basename(one(p, "patches_dsc")),
        "patches_debian_sha256": d / os.path.basename(one(p, "patches_debian")),
        "calibrate_tree_deb_sha256": d / os.path.basename(one(p, "calibrate_tree_deb")),
        "calibrate_tree_member_sha256":
            d / f"{one(p, 'calibrate_tree_package')}_{one(p, 'calibrate_tree_version')}.tar.xz",
        "calibrate_orig_sha256": d / os.path.basename(one(p, "calibrate_orig")),
    }


@pytest.mark.slow
@pytest.mark.parametrize("base", route_bases("debian-revert"))
def test_downloads_are_the_pinned_files(base):
    fetched(base)
    p = pin(base)
    for key, path in downloads(base).items():
        assert path.exists(), f"{path} ({key}) is not in the cache"
        assert sha256(path) == one(p, key), f"{path}: not the pinned {key}"


def patch_series(base):
    """[(patch name, text)] of the pinned debian.tar.xz's quilt series."""
    with tarfile.open(downloads(base)["patches_debian_sha256"], "r:xz") as t:
        def read(name):
            return t.extractfile(f"debian/patches/{name}").read().decode(errors="replace")
        names = [line.split()[0] for line in read("series").splitlines()
                 if line.strip() and not line.startswith("#")]
        return [(n, read(n)) for n in names]


def touched(text):
    """(files a patch touches, files it creates)."""
    files, created, old = set(), set(), None
    for line in text.splitlines():
        if line.startswith("--- "):
            old = line[4:].split("\t")[0].strip()
        elif line.startswith("+++ ") and old is not None:
            new = line[4:].split("\t")[0].strip()
            path = (new if new != "/dev/null" else old).split("/", 1)[1]
            files.add(path)
            if old == "/dev/null":
                created.add(path)
            old = None
    return files, created


@pytest.mark.slow
@pytest.mark.parametrize("base", route_bases("debian-revert"))
def test_fetched_tree_differs_from_debians_only_where_reverted(base):
    tarball, rec = fetched(base)
    p = pin(base)
    outcome = {name: how for how, name in (v.split(" ", 1) for v in rec["patch"])}
    series = patch_series(base)
    assert sorted(outcome) == sorted(n for n, _ in series)
    assert {n for n, h in outcome.items() if h == "kept"} == set(p["revert_keep"])
    assert {n for n, h in outcome.items() if h == "left"} == set(p["revert_leave"])
    reverted = {n for n, h in outcome.items() if h.startswith("reverted")}
    assert {n for n, h in outcome.items() if h == "reverted-fuzz3"} == set(p["revert_fuzz"])
    assert len(reverted) == len(series) - len(p["revert_keep"]) - len(p["revert_leave"]) > 50

    mine, _ = manifest(tarball)
    debian, _ = manifest(downloads(base)["tree_member_sha256"])
    differ = {f for f in mine.keys() | debian.keys() if mine.get(f) != debian.get(f)}
    by_reverted, created, other = set(), set(), set()
    for name, text in series:
        files, new = touched(text)
        if name in reverted:
            by_reverted |= files
            created |= new
        else:
            other |= files
    # Every change is one a reverted patch makes; each file only the other
    # patches touch is Debian's; what reverted patches add is gone.
    assert differ and differ <= by_reverted, sorted(differ - by_reverted)
    assert not (other - by_reverted) & differ
    assert created and not created & mine.keys(), sorted(created & mine.keys())
    # What still differs from the upstream tag: the files of the patches
    # left applied, and those of Debian's patches new in this release.
    left = set().union(*(touched(t)[0] for n, t in series if outcome[n] == "left"))
    if base == "7.3":
        assert left == {
            "tools/perf/Makefile.perf", "Documentation/admin-guide/kernel-parameters.txt",
            "arch/x86/Kconfig", "arch/x86/entry/syscall_64.c", "arch/x86/include/asm/elf.h",
            "arch/x86/include/asm/syscall.h", "drivers/iommu/intel/Kconfig",
            "drivers/iommu/intel/iommu.c"}
        assert len(rec["unknown"]) == 3


@pytest.mark.slow
@pytest.mark.parametrize("base", route_bases("debian-revert"))
def test_fetched_tree_has_none_of_the_excluded_files(base):
    tarball, rec = fetched(base)
    p = pin(base)
    deb = downloads(base)["tree_deb_sha256"]
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True,
                          check=True).stdout
    copyright_text = subprocess.run(["tar", "-xO", "./" + one(p, "tree_copyright")],
                                    input=data, capture_output=True, check=True).stdout.decode()
    m = re.search(r"^Files-Excluded:(.*(?:\n .*)*)", copyright_text, re.M)
    excluded = m.group(1).split()
    assert excluded and sorted(rec["excluded"]) == sorted(excluded)
    files, _ = manifest(tarball)
    assert not [f for f in files for x in excluded if f == x or f.startswith(x + "/")]


@pytest.mark.slow
@pytest.mark.parametrize("base", route_bases("debian-revert"))
def test_method_gives_the_orig_tarball_on_the_calibration_release(base, tmp_path):
    # Debian's tree of the calibration release minus the same series, with
    # patch(1) here, is the vanilla orig tarball: linux-source is exactly
    # orig + debian/patches/series, nothing else.
    fetched(base)
    p = pin(base)
    d = downloads(base)
    subprocess.run(["tar", "-xJf", str(d["calibrate_tree_member_sha256"]), "-C", str(tmp_path)],
                   check=True)
    (tree,) = tmp_path.iterdir()
    for name, text in reversed(patch_series(base)):
        r = subprocess.run(["patch", "-d", str(tree), "-p1", "-R", "-s", "--batch", "--fuzz=0",
                            "--no-backup-if-mismatch", "-r", "-"], input=text.encode(),
                           capture_output=True)
        assert r.returncode == 0, f"{name}: {r.stdout.decode()}{r.stderr.decode()}"
    orig, top = manifest(d["calibrate_orig_sha256"])
    assert top == f"linux-{one(p, 'calibrate_version')}"
    reverted = tree_manifest(tree)
    assert sorted(set(orig) ^ set(reverted)) == []
    assert [f for f in orig if orig[f] != reverted[f]] == []
    assert git_tree(orig) == one(p, "calibrate_tree")
