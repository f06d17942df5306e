"""The one console script, ``commitlog``, and its subcommands.

Each package contributes its own subcommands through ``add_commands(subparsers)`` so that
``store`` stays free of Spark and Kafka imports: ``commitlog dump`` never starts a JVM.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from ingest import version


def _add_broker_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("broker", help="run an embedded Kafka broker in the foreground (Tansu in memory, or "
                                      "Apache Kafka from the jars `make jvm` resolves) and print its "
                                      "bootstrap address")
    p.add_argument("--kind", choices=["tansu", "kafka"], default="tansu",
                   help="tansu (in memory, starts in a fraction of a second; the default) or kafka "
                        "(Apache Kafka, KRaft, one node, on disk: transactions, compaction, retention)")
    p.add_argument("--port", type=int, default=None, help="listen port on 127.0.0.1 (default: a free one)")
    p.add_argument("--log-dir", "--data-dir", dest="log_dir", default=None,
                   help="where the broker's log (and Kafka's data) go (default: a private temp dir)")

    def run(args: argparse.Namespace) -> int:
        from ingest.devtools.broker import BrokerError, run_foreground
        try:
            return run_foreground(kind=args.kind, port=args.port, log_dir=args.log_dir)
        except BrokerError as exc:
            print(f"commitlog broker: {exc}", file=sys.stderr)
            return 2

    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="commitlog",
        description="Kafka to Apache RocketMQ CommitLog, exactly once (Spark Structured Streaming).",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"commitlog {version()}",
                        help="print the version of commitlog-ingest installed and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _add_broker_command(sub)
    from ingest import commands as ingest_commands
    from store import tools as store_tools

    ingest_commands.add_commands(sub)
    store_tools.add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.verbose:
        # the clients' connection chatter drowns the job's own lines; --verbose brings it back
        for name in ("kafka", "py4j"):
            logging.getLogger(name).setLevel(logging.WARNING)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
