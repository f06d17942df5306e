"""The console script exposes one command with subcommands."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_commitlog_lists_its_subcommands() -> None:
    out = subprocess.run([sys.executable, "-m", "ingest.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "broker" in out.stdout
