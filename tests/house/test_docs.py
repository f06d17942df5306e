"""The docs site (mkdocs.yml over docs/) builds strictly: a broken link, a missing anchor or a page left
out of the nav fails it; the command-line reference is the parsers' own (ingest.devtools.cli_reference);
the front page keeps to a page (issue 65)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ingest.devtools.cli_reference import render

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
CLI_PAGE = ROOT / "docs" / "reference" / "cli.md"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").exists()


def test_the_command_line_reference_is_what_the_parsers_say() -> None:
    assert CLI_PAGE.read_text() == render(), (
        "docs/reference/cli.md differs from the argument parsers: run "
        "`python -m ingest.devtools.cli_reference docs/reference/cli.md`")


def test_the_reference_names_every_option_of_every_command() -> None:
    from ingest.cli import build_parser

    page = CLI_PAGE.read_text()
    sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, parser in sub.choices.items():
        assert f"## `commitlog {name}`" in page
        for action in parser._actions:
            for option in [] if action.help == "==SUPPRESS==" or action.dest == "help" else action.option_strings:
                assert f"`{option}" in page, (name, option)


def test_the_front_page_is_short_and_starts_with_the_two_commands() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    first_screen = "\n".join(lines[:40])
    assert "make demo" in first_screen and "make test" in first_screen
    assert (ROOT / "BENCHMARKS.md").read_text().count("\n") <= 300
