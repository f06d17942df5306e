"""Releases a user can name (issue 65): `commitlog --version` is pyproject.toml's version, as the
installed package's metadata says; CHANGELOG.md is headed by versions, the newest being this one."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ingest import version

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_commitlog_version_prints_the_version_pyproject_holds() -> None:
    result = subprocess.run([sys.executable, "-m", "ingest.cli", "--version"], capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout) == (0, f"commitlog {PYPROJECT_VERSION}\n"), (result, "make venv?")
    assert version() == PYPROJECT_VERSION


def test_the_changelog_is_headed_by_versions_the_newest_first() -> None:
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    assert headings[0] == PYPROJECT_VERSION, headings
    assert all(re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+)?", h) for h in headings), headings


def test_every_release_in_the_changelog_has_its_compatibility_fixture() -> None:
    headings = re.findall(r"^## (\d+\.\d+\.\d+)(\.dev\d+)?", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)
    fixtures = {p.name for p in (ROOT / "tests" / "fixtures" / "compat").iterdir() if p.is_dir()}
    for release, dev in headings:
        assert (f"v{release}-dev" if dev else f"v{release}") in fixtures, (release, sorted(fixtures))
