# SPDX-License-Identifier: GPL-2.0
"""make check-kernel: the series checked as the kernel's build bots check
one (scripts/check-kernel.sh: kernel-doc, the documentation build, W=1,
sparse, tinyconfig kernels), then a record of the run (kind
"check-kernel"): each check's verdict and its new warnings, as the
script's logs in BUILD/check-kernel/ say them.

--record-only writes the record of the last run without checking again.
"""

import re
import subprocess
import sys
from pathlib import Path

from asyncfork import entry, results
from asyncfork.paths import BUILD, RESULTS, TOP

SCRIPT = TOP / "scripts/check-kernel.sh"
CHECKS = ("kdoc", "docs", "w1", "sparse", "tiny")

_HEAD = re.compile(r"^check-kernel: (\S+) \+ (\d+) patches \((.*)\), -j(\d+), into (.*)$")
_VERDICT = re.compile(r"^check-kernel: \[(\w+)\] (passed|FAILED: (.*))$")
_START = re.compile(r"^check-kernel: \[(\w+)\] (\d\d:\d\d:\d\d)$")
_END = re.compile(r"^check-kernel: (passed|failed): .* in (\d+) min (\d+) s; log ")


def parse_log(text: str) -> dict:
    """What check-kernel.log says: the tree, each check's verdict and the
    run's length; a check named but without a verdict did not finish."""
    out = {"kernelversion": None, "patches": None, "series_dir": None, "jobs": None,
           "checks": {}, "seconds": None, "finished": False}
    for line in text.splitlines():
        if m := _HEAD.match(line):
            out.update(kernelversion=m[1], patches=int(m[2]), series_dir=m[3], jobs=int(m[4]))
        elif m := _START.match(line):
            out["checks"].setdefault(m[1], {"verdict": "unfinished", "why": None})
        elif m := _VERDICT.match(line):
            passed = m[2] == "passed"
            out["checks"][m[1]] = {"verdict": "passed" if passed else "failed",
                                   "why": None if passed else m[3]}
        elif m := _END.match(line):
            out.update(seconds=int(m[2]) * 60 + int(m[3]), finished=True)
    return out


def new_warnings(work: Path, check: str) -> list[str]:
    """The check's new warnings (NAME.new), if it wrote any."""
    path = work / f"{check}.new"
    try:
        return [ln for ln in path.read_text().splitlines() if ln.strip()]
    except OSError:
        return []


def record(work: Path, argv: list[str]) -> dict:
    log = work / "check-kernel.log"
    parsed = parse_log(log.read_text())
    if parsed["kernelversion"] is None:
        raise SystemExit(f"check-kernel: {log} is no log of scripts/check-kernel.sh")
    checks = []
    for name, v in parsed["checks"].items():
        checks.append({"check": name, "verdict": v["verdict"], "why": v["why"],
                       "new_warnings": new_warnings(work, name)})
    seconds = parsed["seconds"]
    started = log.stat().st_mtime - (seconds or 0)
    tree = {"label": "series", "release": f"{parsed['kernelversion']} + "
            f"{parsed['patches']} patches", "flavour": None, "config_sha256": None,
            "async_fork": None}
    return {**results.metadata("check-kernel", kernels=[tree], machine_info=results.machine(),
                               argv=argv, args={"work": work, "jobs": parsed["jobs"],
                                                "series_dir": parsed["series_dir"]},
                               started=started),
            "seconds": seconds, "finished": parsed["finished"],
            "passed": parsed["finished"] and bool(checks) and
            all(c["verdict"] == "passed" for c in checks),
            "checks": checks}


def main(argv: list[str] | None = None) -> int:
    argv_ = sys.argv[1:] if argv is None else argv
    ap = entry.parser(__doc__)
    ap.add_argument("--build", default=str(BUILD),
                    help="the build folder whose linux/ tree make source prepared")
    ap.add_argument("--record-only", action="store_true",
                    help="write the record of the last run, do not check again")
    results.add_record_dir(ap)
    a = ap.parse_args(argv_)
    build = Path(a.build)
    work = build / "check-kernel"
    rc = 0
    if not a.record_only:
        rc = subprocess.run([str(SCRIPT), str(build)], check=False).returncode
        if rc not in (0, 1):
            return rc
    if not (work / "check-kernel.log").is_file():
        print(f"check-kernel: no {work}/check-kernel.log: run make check-kernel",
              file=sys.stderr)
        return 2
    rec = record(work, ["asyncfork", "check-kernel", *argv_])
    path = results.write(rec, Path(a.record_dir or RESULTS), "check-kernel")
    print(f"check-kernel: record {path}")
    return rc


if __name__ == "__main__":
    sys.exit(entry.run(main, "check-kernel"))
