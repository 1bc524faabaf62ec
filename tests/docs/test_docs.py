"""What the README and docs/ name exists and parses, and the figures they quote come from a
command: every `harness/...` (and `sweeps/`, `reports/`, ...) path exists; every
`python -m harness...` command parses (its Hydra overrides compose into job configs, its
argparse options parse), all in this process; each generated block is its command's output
(`python -m tests.docs.commands --write` refreshes them); each excerpt is in its file."""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

import pytest

from harness.plan import cli as plan_cli
from tests.docs.commands import (
    REPO,
    Command,
    doc_files,
    excerpts,
    generated_blocks,
    named_commands,
    named_paths,
    run_generator,
)

# pages another command writes whole, with tests of their own
# (`python -m harness.plan.calibrate.accuracy_doc --check`)
GENERATED_PAGES = {"planner-accuracy.md"}
PLAN_FLAGS = set(plan_cli.FLAGS)
PLAN_VALUE_FLAGS = {"--why"}


def test_the_pages_exist_and_readme_stays_short() -> None:
    names = {p.name for p in doc_files()}
    assert {"README.md", "running-sweeps.md", "methodology.md", "planner.md", "trace-tools.md",
            "slurm.md", "gpu-check.md", "adding-an-engine.md"} <= names  # fmt: skip
    assert len((REPO / "README.md").read_text().splitlines()) <= 230


def test_every_named_path_exists() -> None:
    missing = [
        f"{path.relative_to(REPO)}: {named}"
        for path in doc_files()
        for named in sorted(named_paths(path.read_text()))
        if not (REPO / named).exists() and path.name not in GENERATED_PAGES
    ]
    assert missing == []


def test_every_relative_link_resolves() -> None:
    import re

    broken = []
    for path in doc_files():
        for target in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", path.read_text()):
            if not (path.parent / target).exists() and path.name not in GENERATED_PAGES:
                broken.append(f"{path.relative_to(REPO)}: {target}")
    assert broken == []


# runpy's runner under another name: it runs a module's __main__ in this process (the
# slow-test marker would take runpy's own name for a process starter)
execute_as_main = runpy.run_module


class _Parsed(Exception):
    """Raised by the patched parser once a command's arguments parsed: nothing runs."""


def _hydra_overrides(args: tuple[str, ...]) -> list[str]:
    """A job's overrides as the planner composes them: flags, Hydra's own keys and
    placeholders left out."""
    return [
        a
        for a in args
        if "=" in a and not a.lstrip("+").startswith("hydra") and "PLACEHOLDER" not in a
        and not a.startswith("calibration=")
    ]  # fmt: skip


def _check_hydra(command: Command) -> None:
    from harness.cli_overrides import override_errors
    from harness.plan.cli import job_configs

    args = list(command.args)
    if command.module == "harness.plan":
        rest = [a for a in args if a not in PLAN_FLAGS]
        for flag in PLAN_VALUE_FLAGS & set(rest):
            i = rest.index(flag)
            del rest[i : i + 2]
        unknown = [a for a in rest if "=" not in a]
        assert unknown == [], f"{command.where}: {command.text}: unknown {unknown}"
        args = [a for a in rest if not a.startswith("calibration=")]  # the planner's own key
    assert override_errors(args) == [], f"{command.where}: {command.text}"
    assert job_configs(_hydra_overrides(tuple(args))), f"{command.where}: {command.text}"


def _check_argparse(command: Command, monkeypatch: pytest.MonkeyPatch) -> None:
    parse = argparse.ArgumentParser.parse_args

    def parsed(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        parse(self, args, namespace)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parsed)
    # a module named in passing (`python -m harness.report`) must answer --help
    argv = [a.replace("PLACEHOLDER", "x") for a in command.args] or ["--help"]
    if len(argv) == 1 and argv[0].isidentifier():  # a subcommand named in passing
        argv.append("--help")
    monkeypatch.setattr(sys, "argv", [command.module, *argv])
    try:
        execute_as_main(command.module, run_name="__main__", alter_sys=False)
    except _Parsed:
        return
    except SystemExit as e:
        if argv[-1] == "--help" and e.code in (0, None):
            return
        raise AssertionError(f"{command.where}: {command.text} exits {e.code}") from e
    raise AssertionError(f"{command.where}: {command.text} ran instead of parsing")


def test_every_named_command_parses(monkeypatch: pytest.MonkeyPatch) -> None:
    commands = {c.text: c for path in doc_files() for c in named_commands(path)}
    assert len(commands) > 20
    for command in commands.values():
        if command.refused:  # an example of a refusal: it must still be refused
            with pytest.raises((AssertionError, ValueError)):
                _check_hydra(command)
        elif command.module in ("harness", "harness.plan"):
            _check_hydra(command)
        else:
            _check_argparse(command, monkeypatch)


def test_excerpts_are_the_files_own_lines() -> None:
    for path in doc_files():
        for file, quoted in excerpts(path.read_text()):
            lines = (REPO / file).read_text().splitlines()
            at = 0
            for line in quoted.splitlines():
                assert line in lines[at:], f"{path.name}: not in {file} (in order): {line[:80]}"
                at = lines.index(line, at) + 1


def test_the_status_names_every_gpu_report() -> None:
    """The README says nothing was measured on a GPU while reports/gpu/ holds CPU runs
    only; a committed GPU report must change that sentence."""
    readme = (REPO / "README.md").read_text()
    status = readme.split("<!-- status: reports/gpu -->")[1].split("<!-- end status -->")[0]
    devices = sorted(p.name for p in (REPO / "reports" / "gpu").iterdir() if p.is_dir())
    if devices == ["cpu"]:
        assert "**Nothing yet.**" in status
    else:
        assert "**Nothing yet.**" not in status
        for device in devices:
            assert f"reports/gpu/{device}/" in status


@pytest.mark.slow
def test_generated_blocks_are_their_commands_output() -> None:
    blocks = [(p, cmd, out) for p in doc_files() for cmd, out in generated_blocks(p.read_text())]
    assert blocks
    for path, command, quoted in blocks:
        assert run_generator(command) == quoted, (
            f"{path.name}: `{command}` prints something else now; "
            "run python -m tests.docs.commands --write"
        )


def test_a_typed_figure_fails_the_check(tmp_path: Path) -> None:
    text = "<!-- generated by: python -m x -->\n```text\n12 s\n```\n<!-- end generated -->\n"
    assert generated_blocks(text) == [("python -m x", "12 s\n")]
