"""``commitlog run`` and ``commitlog replay``."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ingest.config import JobConfigError, add_job_arguments, config_from_args

EXIT_USAGE = 2


def _run(args: argparse.Namespace) -> int:
    """Settings, the store path, the checkpoint and the brokers are checked, and the store opened,
    before Spark starts: what is wrong with them is one line and exit status 2. So is a store that
    fails under the job (a full disk): the batch in progress is not committed, the store is closed,
    and the next run resumes from its last commit."""
    from ingest.broker_groups import BrokerGroupError, check_store_group
    from ingest.job import StreamingQueryError, check_spool_setting, run
    from ingest.preflight import PreflightError, check_brokers, check_checkpoint_path, check_store_path
    from sink.foreach_batch import BatchWriteError
    from sink.spark_checkpoint import CheckpointRewindError, check_checkpoint_dir
    from sink.trust import UntrustedPathError
    from store import StoreError

    try:
        cfg = config_from_args(args)
        # what another user could change is refused whatever --skip-preflight says (sink.trust)
        check_spool_setting(cfg)
        check_store_group(cfg.store, cfg.group)
        if not cfg.skip_preflight:
            check_store_path(cfg.store)
            check_checkpoint_path(cfg.checkpoint)
            check_brokers(cfg.bootstrap_servers, _connect_timeout_s(cfg.kafka_option))
            _warn_missing_topics(cfg)
        check_checkpoint_dir(cfg.checkpoint)    # whatever --skip-preflight says: see sink.trust
        return run(cfg)
    except (JobConfigError, PreflightError, StoreError, UntrustedPathError, BrokerGroupError, BatchWriteError,
            CheckpointRewindError, StreamingQueryError, OSError) as exc:
        print(f"commitlog run: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _warn_missing_topics(cfg: Any) -> None:
    """A subscribed topic the brokers lack is one warning line (the job reads it once it exists)."""
    from ingest.config import kafka_reader_options
    from ingest.kafka.options import KafkaSourceError, kafka_client_params
    from ingest.preflight import missing_topics

    if not cfg.subscribe:
        return
    names = [t.strip() for t in cfg.subscribe.split(",") if t.strip()]
    try:
        missing = missing_topics(kafka_client_params(kafka_reader_options(cfg, "earliest")), names)
    except (KafkaSourceError, OSError) as exc:
        logging.getLogger("commitlog.run").warning("could not list the brokers' topics: %s", exc)
        return
    if missing:
        logging.getLogger("commitlog.run").warning(
            "topic%s %s not on the brokers at %s (yet): the job reads %s once %s", "s" if len(missing) > 1 else "",
            ", ".join(missing), cfg.bootstrap_servers, "them" if len(missing) > 1 else "it",
            "they exist" if len(missing) > 1 else "it exists")


def _connect_timeout_s(kafka_options: dict[str, str]) -> float:
    for key in ("socket.connection.setup.timeout.ms", "kafka.socket.connection.setup.timeout.ms"):
        if key in kafka_options:
            return int(kafka_options[key]) / 1000
    return 10.0     # kafka-python's socket.connection.setup.timeout.ms default


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the ingest subcommands (run, replay)."""
    p = sub.add_parser("run", help="stream Kafka topics into a CommitLog store, exactly once",
                       description="Kafka to RocketMQ CommitLog through Spark Structured Streaming. "
                                   "SIGTERM or Ctrl-C stops after the current batch and closes the store.")
    add_job_arguments(p, streaming=True)
    p.set_defaults(func=_run)
    from ingest.replay import cli as replay

    replay.add_command(sub)
