"""The command-line reference page (docs/reference/cli.md), written from the argparse definitions of
``commitlog`` (ingest.cli.build_parser), so that the page cannot say what the parsers do not.

``python -m ingest.devtools.cli_reference docs/reference/cli.md`` writes it; tests/house/test_docs.py fails
when the page in the repository and the parsers disagree."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

HEADER = """# Command-line reference

Generated from the argument parsers (`python -m ingest.devtools.cli_reference docs/reference/cli.md`);
`tests/house/test_docs.py` fails when this page and the parsers disagree. `commitlog COMMAND --help` prints
the same. Every option of `run` and `replay` can also come from a TOML file (`--config job.toml`, keys
as the long options); the command line wins.
"""


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes = action.nargs != 0
    metavar = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}" if action.choices
                                 else action.dest.upper())
    return ", ".join(f"`{o} {metavar}`" if takes else f"`{o}`" for o in action.option_strings)


def _job_defaults() -> dict[str, object]:
    """``run`` and ``replay`` leave their settings' defaults to the job's settings (a TOML file of
    ``--config`` may set them too): those are JobConfig's."""
    from ingest.config import JobConfig

    return {f.name: f.default for f in dataclasses.fields(JobConfig) if f.default is not dataclasses.MISSING}


def _default(action: argparse.Action) -> str:
    value = _job_defaults().get(action.dest) if action.default is argparse.SUPPRESS else action.default
    if action.nargs == 0 or value in (None, argparse.SUPPRESS, False, [], ""):
        return ""
    return f"`{value}`"


def _options(parser: argparse.ArgumentParser) -> Iterator[str]:
    actions = [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
               and a.help != argparse.SUPPRESS]
    if not actions:
        return
    yield "| option | default | what |"
    yield "|---|---|---|"
    for action in actions:
        yield f"| {_flags(action)} | {_default(action)} | {_cell(action.help or '')} |"


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return sorted((name, helps.get(name, ""), sub) for name, sub in action.choices.items()
                          if sub.prog.endswith(f" {name}"))
    return []


def render() -> str:
    """The whole page."""
    from ingest.cli import build_parser

    parser = build_parser()
    lines = [HEADER, "## `commitlog`", "", _cell(parser.description or ""), "", *_options(parser), ""]
    for name, summary, sub in _subcommands(parser):
        lines += [f"## `commitlog {name}`", "", _cell(summary), ""]
        if sub.description and sub.description != summary:
            lines += [_cell(sub.description), ""]
        lines += [*_options(sub), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ingest.devtools.cli_reference PAGE.md", file=sys.stderr)
        return 2
    Path(args[0]).write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
