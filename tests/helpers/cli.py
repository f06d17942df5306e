"""Running the ``commitlog`` command line in the test's own process, for the tests of its commands."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout

from ingest.cli import main


def run(*argv: str) -> tuple[int, str, str]:
    """``commitlog ARGV...``: its exit code, what it printed and what it logged."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def jsonl(text: str) -> list[dict]:
    """The JSON lines of a command's output."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]
