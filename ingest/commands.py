"""``commitlog run`` and ``commitlog replay``."""

from __future__ import annotations

import argparse

from ingest.config import add_job_arguments, config_from_args


def _run(args: argparse.Namespace) -> int:
    from ingest.job import run

    return run(config_from_args(args))


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ingest subcommands (run, replay)."""
    p = sub.add_parser("run", help="stream Kafka topics into a CommitLog store, exactly once",
                       description="Kafka to RocketMQ CommitLog through Spark Structured Streaming. "
                                   "SIGTERM or Ctrl-C stops after the current batch and closes the store.")
    add_job_arguments(p, streaming=True)
    p.set_defaults(func=_run)
    from ingest.replay import command as replay

    replay.add_command(sub)
