"""The store commands: dump, verify, stat, get, clean (filled in by the store-commands work)."""

from __future__ import annotations

import argparse


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the store subcommands."""
