"""``commitlog run`` and ``commitlog replay``."""

from __future__ import annotations

import argparse
import sys

from ingest.config import JobConfigError
from ingest.job_arguments import add_job_arguments, config_from_args
from ingest.redaction import redacted

EXIT_USAGE = 2


def _run(args: argparse.Namespace) -> int:
    """Settings, the store path, the checkpoint and the brokers are checked (ingest.lifecycle), and
    the store opened, before Spark starts: what is wrong with them is one line and exit status 2. So
    is a store that fails under the job (a full disk): the batch in progress is not committed, the
    store is closed, and the next run resumes from its last commit."""
    from ingest.broker_groups import BrokerGroupError
    from ingest.job import StreamingQueryError, run
    from ingest.kafka.commit_group import CommitGroupError
    from ingest.kafka.options import KafkaSourceError
    from ingest.lifecycle import JobLifecycle
    from ingest.preflight import PreflightError
    from sink.foreach_batch import BatchWriteError
    from sink.handover.trust import UntrustedPathError
    from sink.spark_checkpoint import CheckpointRewindError
    from store import StoreError, describe_failure

    cfg = None
    try:
        cfg = config_from_args(args)
        return run(JobLifecycle(cfg, "run", reach_brokers=True))
    except (JobConfigError, PreflightError, StoreError, UntrustedPathError, BrokerGroupError, BatchWriteError,
            CheckpointRewindError, StreamingQueryError, KafkaSourceError, CommitGroupError, OSError) as exc:
        # a bare OSError names its call and file (describe_failure); ours say what they need already
        print(f"commitlog run: error: {redacted(describe_failure(exc), cfg and cfg.kafka_option)}", file=sys.stderr)
        return EXIT_USAGE


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ingest subcommands (run, replay)."""
    p = sub.add_parser("run", help="stream Kafka topics into a CommitLog store, exactly once",
                       description="Kafka to RocketMQ CommitLog through Spark Structured Streaming. "
                                   "SIGTERM or Ctrl-C stops after the current batch and closes the store.")
    add_job_arguments(p, streaming=True)
    p.set_defaults(func=_run)
    from ingest.replay import cli as replay

    replay.add_command(sub)
