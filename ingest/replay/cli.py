"""``commitlog replay``'s command line: its options, and the run with its exit codes
(ingest.replay.command does the replay)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from ingest.config import JobConfig, JobConfigError
from ingest.job_arguments import add_job_arguments, config_from_args
from ingest.redaction import redacted
from ingest.replay.plan import FILE_FORMATS, Bound, ReplayError, parse_offsets_json

if TYPE_CHECKING:
    from ingest.replay.command import ReplayOptions

_OWN = ("topics", "topic_pattern", "from_files", "format", "replay_from", "from_timestamp", "from_offsets",
        "replay_to", "to_timestamp", "to_offsets", "strict", "no_verify", "progress")


def add_command(sub: argparse._SubParsersAction) -> None:
    """Register ``commitlog replay``."""
    p = sub.add_parser(
        "replay", help="replay what Kafka topics (or files exported from them) hold into a CommitLog store",
        description="A bounded, resumable run of the ingest job: the range is fixed at start; killed and "
                    "started again with the same arguments it continues where its last commit ended and "
                    "writes nothing twice. Records with timestamp >= --from-timestamp and < --to-timestamp "
                    "(Kafka's and Spark's rule: a timestamp bound is the first offset at or after it).")
    src = p.add_argument_group("what to replay")
    which = src.add_mutually_exclusive_group()
    which.add_argument("--topics", help="Kafka topics, comma separated (with --from-files: only these)")
    which.add_argument("--topic-pattern", help="a regex of Kafka topics (whole name)")
    src.add_argument("--from-files", metavar="DIR",
                     help="exported records (the Kafka source's columns) instead of Kafka")
    src.add_argument("--format", choices=FILE_FORMATS, default="jsonl",
                     help="with --from-files: jsonl (key/value base64) or parquet")
    begin = src.add_mutually_exclusive_group()
    begin.add_argument("--from", dest="replay_from", choices=["earliest"], default="earliest",
                       help="start at the first retained record (default)")
    begin.add_argument("--from-timestamp", type=int, metavar="MS",
                       help="start at each partition's first record with timestamp >= MS (epoch ms)")
    begin.add_argument("--from-offsets", metavar="JSON", help='{"topic": {"0": 23, "1": -2}} (-2 earliest)')
    finish = src.add_mutually_exclusive_group()
    finish.add_argument("--to", dest="replay_to", choices=["latest"], default="latest",
                        help="end at each partition's end when the replay starts (default)")
    finish.add_argument("--to-timestamp", type=int, metavar="MS",
                        help="end before each partition's first record with timestamp >= MS")
    finish.add_argument("--to-offsets", metavar="JSON", help='exclusive end offsets, -1 = latest')
    src.add_argument("--strict", action="store_true",
                     help="fail when --from-timestamp reaches past what retention kept")
    src.add_argument("--no-verify", action="store_true", help="skip the `commitlog verify` at the end")
    src.add_argument("--progress", choices=["auto", "bar", "log", "none"], default="auto",
                     help="progress bar on a terminal, log lines otherwise (auto)")
    add_job_arguments(p, streaming=False)
    p.set_defaults(func=replay_command)


def options_from_args(args: argparse.Namespace) -> ReplayOptions:
    # the replay itself (the sink, pyarrow) is imported when a replay runs: every other
    # subcommand (verify, dump, get) builds this parser and should not pay for it
    from ingest.replay.command import ReplayOptions

    if not (args.topics or args.topic_pattern or args.from_files):
        raise ReplayError("say what to replay: --topics T1,T2, --topic-pattern REGEX or --from-files DIR")
    if args.from_timestamp is not None:
        begin = Bound("timestamp", timestamp=args.from_timestamp)
    elif args.from_offsets:
        begin = Bound("offsets", offsets=parse_offsets_json(args.from_offsets, "--from-offsets"))
    else:
        begin = Bound("earliest")
    if args.to_timestamp is not None:
        finish = Bound("timestamp", timestamp=args.to_timestamp)
    elif args.to_offsets:
        finish = Bound("offsets", offsets=parse_offsets_json(args.to_offsets, "--to-offsets"))
    else:
        finish = Bound("latest")
    topics = tuple(t.strip() for t in args.topics.split(",") if t.strip()) if args.topics else None
    return ReplayOptions(topics=topics, topic_pattern=args.topic_pattern, from_files=args.from_files,
                         file_format=args.format, begin=begin, finish=finish, strict=args.strict,
                         verify=not args.no_verify, progress=args.progress)


def job_config_from_args(args: argparse.Namespace, opts: ReplayOptions) -> JobConfig:
    """The shared settings; the topic selection becomes the job's subscribe/subscribePattern."""
    ns = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in _OWN})
    if opts.topic_pattern:
        ns.subscribe_pattern = opts.topic_pattern
    else:
        ns.subscribe = ",".join(opts.topics or ("*",))
    if opts.from_files and getattr(ns, "commit_group", None) and not getattr(ns, "bootstrap_servers", None):
        raise ReplayError(f"--commit-group {ns.commit_group}: the group lives in Kafka; give --bootstrap-servers "
                          "with --from-files, or no --commit-group")
    if opts.from_files and not getattr(ns, "bootstrap_servers", None):
        ns.bootstrap_servers = "(unused: --from-files)"   # the file replay never connects to Kafka
    return config_from_args(ns)


def replay_command(args: argparse.Namespace) -> int:
    from ingest.broker_groups import BrokerGroupError
    from ingest.lifecycle import StopSignal
    from ingest.kafka.options import KafkaSourceError
    from ingest.metrics import MetricsPortError
    from ingest.preflight import PreflightError
    from ingest.replay.command import EXIT_ERROR, EXIT_OK, EXIT_STOPPED, EXIT_VERIFY_FAILED, replay
    from sink.handover.packed import PackedBatchError
    from sink.handover.trust import UntrustedPathError
    from store import StoreError

    if not getattr(args, "verbose", False):
        # kafka-python logs every connection at INFO: noise around the progress lines
        logging.getLogger("kafka").setLevel(logging.WARNING)
    signals = StopSignal()
    cfg = None
    try:
        opts = options_from_args(args)
        cfg = job_config_from_args(args, opts)
        signals.install()
        summary = replay(cfg, opts, stop=signals.event)
    except (ReplayError, JobConfigError, KafkaSourceError, StoreError, UntrustedPathError, BrokerGroupError,
            MetricsPortError, PackedBatchError, PreflightError) as exc:     # a spool file refused (sink.handover.spool): a full disk, say
        print(f"commitlog replay: error: {redacted(exc, cfg and cfg.kafka_option)}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        signals.restore()
    print("\n".join(summary.lines()))
    if summary.verified is False:
        return EXIT_VERIFY_FAILED
    return EXIT_OK if summary.complete else EXIT_STOPPED
