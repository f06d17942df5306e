"""``commitlog run`` and ``commitlog replay`` (filled in by the streaming-job work)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ingest subcommands (run, replay)."""
