# SPDX-License-Identifier: GPL-2.0
"""The one command line, asyncfork VERB (asyncfork.cli): a verb for each
make target that runs Python, of the target's name, the only command
pyproject.toml installs; each verb's --help says its defaults."""

import argparse
import re
import subprocess
import sys
import tomllib

import pytest

from asyncfork import cli, entry
from conftest import TOP


def make_recipes() -> dict[str, str]:
    """{target: its recipe} of the Makefile's rules."""
    recipes, target = {}, None
    for line in (TOP / "Makefile").read_text().splitlines():
        m = re.match(r"^([a-z0-9-]+):", line)
        if m:
            target = m.group(1)
        elif line.startswith("\t") and target:
            recipes[target] = recipes.get(target, "") + line + "\n"
        elif not line.strip():
            target = None
    return recipes


def test_make_targets_run_their_verb():
    runs = {t: re.findall(r"-m asyncfork(\S*) (\S+)", r) for t, r in make_recipes().items()}
    runs = {t: r for t, r in runs.items() if r}
    assert {"demo", "bench-fork", "bench-redis", "bench-sync", "bench-offcost", "soak",
            "mutate", "report", "test-deb", "vm"} <= set(runs), runs
    for target, calls in runs.items():
        # python -m asyncfork TARGET, never a module of the package.
        assert calls == [("", target)], (target, calls)
        assert target in cli.VERBS


def test_scripts_run_verbs():
    # The shell scripts run verbs too (asyncfork.buildlog is their helper,
    # no make target's); the two scripts/*.py paths are aliases of verbs.
    for script in sorted(TOP.glob("scripts/*")):
        text = script.read_text()
        for module, verb in re.findall(r"-m\"?,? \"?asyncfork(\S*?)\"?,? \"?([a-z-]+)", text):
            assert module in ("", ".buildlog"), (script, module)
            if not module:
                assert verb in cli.VERBS, (script, verb)


def test_one_console_command():
    project = tomllib.loads((TOP / "pyproject.toml").read_text())["project"]
    assert project["scripts"] == {"asyncfork": "asyncfork.cli:main"}


@pytest.mark.parametrize("verb", sorted(cli.VERBS))
def test_verb_help_shows_the_defaults(verb, monkeypatch, capsys):
    # The parser each verb builds, caught where it parses.
    parsers = []

    def caught(self, args=None, namespace=None):
        parsers.append(self)
        raise SystemExit(0)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", caught)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with pytest.raises(SystemExit):
        cli.main([verb, "--help"])
    ap, = parsers
    assert ap.prog == f"asyncfork {verb}"
    subs = [p for a in ap._actions if isinstance(a, argparse._SubParsersAction)
            for p in a.choices.values()]
    for p in [ap] + subs:
        assert p.formatter_class is entry.HelpFormatter, p.prog
        for action in p._actions:
            if entry.HelpFormatter._shows_default(action):
                # Its value, or the default in words ("default: BUILD/debug").
                line = p._get_formatter()._format_action(action)
                assert "default" in line, (p.prog, line)


def test_formatter():
    ap = entry.parser("What it does.\n\nMore.")
    ap.add_argument("--plain", default=3)
    ap.add_argument("--said", default=5, help="five (default 5)")
    ap.add_argument("--told", default="x", help="a letter")
    ap.add_argument("--flag", action="store_true", help="a flag")
    ap.add_argument("--none", help="nothing")
    text = " ".join(ap.format_help().split())
    assert "What it does." in text and "More." not in text
    assert "--plain PLAIN default: 3" in text
    assert "five (default 5)" in text and "five (default 5) (default" not in text
    assert "a letter (default: x)" in text
    assert "a flag --none" in text and "nothing" in text and "default: None" not in text


def test_no_verb_and_unknown_verb():
    py = [sys.executable, "-m", "asyncfork"]
    env = {"PYTHONPATH": str(TOP / "python"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(py, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 2 and "usage: asyncfork VERB" in r.stderr
    for verb in cli.VERBS:
        assert f"\n  {verb} " in r.stderr
    r = subprocess.run(py + ["--help"], capture_output=True, text=True, env=env, timeout=60,
                       check=False)
    assert r.returncode == 0 and "usage: asyncfork VERB" in r.stdout
    r = subprocess.run(py + ["bench_fork"], capture_output=True, text=True, env=env,
                       timeout=60, check=False)
    assert r.returncode == 2 and "no verb 'bench_fork'" in r.stderr


def test_ctrl_c_is_one_line(capsys):
    def main(argv):
        raise KeyboardInterrupt
    assert entry.run(main, "demo", []) == 130
    assert capsys.readouterr().err == "demo: interrupted\n"
    assert entry.run(lambda argv: None, "demo") == 0
