# SPDX-License-Identifier: GPL-2.0
"""Compare a kernel .config with Debian's: equal except for a stated list.

`make deb` starts from Debian's own configuration (package
linux-config-6.12) and changes only what scripts/build-deb.sh lists.  This
module says whether a .config that came out of olddefconfig (or out of the
build) is exactly that: every symbol of Debian's config has the same value,
every symbol of the change list has the value the list gives it, and no
other symbol was added or dropped.

    asyncfork deb-config check --debian config.amd64_none_cloud-amd64.xz \\
        --config build/deb-cloud-amd64/.config --changes changes.config \\
        [--toolchain CONFIG_CC_VERSION_TEXT]

exits 0 when the config is as stated, 1 with one line per difference
otherwise.  A --toolchain symbol (the compiler's version text) may differ
with a warning: it names the build machine's compiler, not an option.
"""

from __future__ import annotations

import lzma
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from asyncfork import entry

NOT_SET = "n"
_SET = re.compile(r"^(CONFIG_[A-Za-z0-9_]+)=(.*)$")
_UNSET = re.compile(r"^# (CONFIG_[A-Za-z0-9_]+) is not set$")


class ConfigError(Exception):
    """A line that is neither a setting, a comment nor blank."""


def parse_config(text: str, name: str = "config") -> dict[str, str]:
    """Symbol -> value; "# CONFIG_X is not set" gives "n".  Strings keep
    their quotes, so '""' (empty string) and "n" (not set) differ."""
    values: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _SET.match(line) or _UNSET.match(line)
        if m:
            sym = m.group(1)
            if sym in values:
                raise ConfigError(f"{name}:{n}: {sym} is set twice")
            values[sym] = m.group(2) if m.re is _SET else NOT_SET
        elif line and not line.startswith("#"):
            raise ConfigError(f"{name}:{n}: not a config line: {raw!r}")
    return values


def load_config(path: str | Path) -> dict[str, str]:
    """Read a .config, xz-compressed when its name ends in .xz."""
    p = Path(path)
    data = lzma.decompress(p.read_bytes()) if p.suffix == ".xz" else p.read_bytes()
    return parse_config(data.decode(), str(p))


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _show(v: str | None) -> str:
    return "(absent)" if v is None else ("not set" if v == NOT_SET else v)


def compare(debian: dict[str, str], ours: dict[str, str],
            changes: dict[str, str], toolchain: frozenset[str] | set[str] = frozenset()
            ) -> Report:
    """Is `ours` Debian's config plus exactly `changes`?

    - a symbol in `changes` must have that value in `ours` (a change that
      Kconfig refused, e.g. for an unmet dependency, is an error);
    - every other symbol must have Debian's value in `ours`, and must be
      in both or in neither (an option olddefconfig added or dropped is an
      error, as is one whose value moved);
    - a `toolchain` symbol may differ: a warning, not an error.
    """
    r = Report()
    for sym, want in sorted(changes.items()):
        got = ours.get(sym)
        if got != want:
            r.errors.append(f"{sym}: the build asks for {_show(want)}, the config has {_show(got)}")
    for sym in sorted((debian.keys() | ours.keys()) - changes.keys()):
        d, o = debian.get(sym), ours.get(sym)
        if d == o:
            continue
        if sym in toolchain:
            r.warnings.append(f"{sym}: Debian built with {_show(d)}, this build uses {_show(o)}")
        elif d is None:
            r.errors.append(f"{sym}: not in Debian's config, added as {_show(o)}")
        elif o is None:
            r.errors.append(f"{sym}: Debian has {_show(d)}, dropped from this config")
        else:
            r.errors.append(f"{sym}: Debian has {_show(d)}, this config has {_show(o)}")
    return r


def main(argv: list[str] | None = None) -> int:
    ap = entry.parser(__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="compare a .config with Debian's plus a change list",
                       formatter_class=entry.HelpFormatter)
    c.add_argument("--debian", required=True, help="Debian's config (.xz or plain)")
    c.add_argument("--config", required=True, help="the .config to check")
    c.add_argument("--changes", required=True,
                   help="the deliberate changes, as config lines (CONFIG_X=v or '# CONFIG_X is not set')")
    c.add_argument("--toolchain", action="append", default=[],
                   help="a symbol that names the compiler and may differ (warning only)")
    a = ap.parse_args(argv)
    try:
        debian = load_config(a.debian)
        ours = load_config(a.config)
        changes = load_config(a.changes)
    except (OSError, lzma.LZMAError, ConfigError) as e:
        print(f"deb_config: {e}", file=sys.stderr)
        return 2
    r = compare(debian, ours, changes, frozenset(a.toolchain))
    for w in r.warnings:
        print(f"deb_config: warning: {w}", file=sys.stderr)
    if not r.ok:
        print(f"deb_config: {a.config} is not Debian's config ({a.debian}) plus the "
              f"{len(changes)} changes in {a.changes}: {len(r.errors)} differences:",
              file=sys.stderr)
        for e in r.errors:
            print(f"  {e}", file=sys.stderr)
        return 1
    print(f"deb_config: {a.config} = Debian's config + {len(changes)} stated changes "
          f"({len(ours)} symbols)")
    return 0


if __name__ == "__main__":
    sys.exit(entry.run(main, "deb-config"))
