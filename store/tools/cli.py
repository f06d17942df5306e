"""The store commands: dump, verify, stat, get, clean. All but ``clean`` are read-only and safe
while a writer runs (they read up to the last commit); ``clean`` takes the writer's lock."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from store.errors import StoreError

EXIT_OK, EXIT_PROBLEMS, EXIT_UNREADABLE = 0, 1, 2


def _int(text: str) -> int:
    """Decimal (leading zeros allowed, as in segment names) or 0x-hex integers for offsets."""
    return int(text, 16) if text.lower().startswith(("0x", "-0x")) else int(text, 10)


def _guard(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Errors a user can act on become one line on stderr and exit status 2."""
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except BrokenPipeError:   # `commitlog dump ... | head`: stop quietly
            sys.stdout = open(os.devnull, "w")   # noqa: SIM115  (the interpreter flushes stdout at exit)
            return EXIT_OK
        except (StoreError, OSError) as e:
            print(f"commitlog {args.command}: {e}", file=sys.stderr)
            return EXIT_UNREADABLE
    return wrapped


def _dump(args: argparse.Namespace) -> int:
    from store.log.source import open_source
    from store.tools.dump import run_dump

    src = open_source(args.path, base=args.base)
    return run_dump(src, sys.stdout, from_offset=args.from_offset, topic=args.topic, queue_id=args.queue,
                    limit=args.limit, as_json=args.json)


def _verify(args: argparse.Namespace) -> int:
    from store.log.source import open_source
    from store.tools.verify import print_report, reuse_freed_memory, verify_source

    reuse_freed_memory()        # this process exits when the report is out
    src = open_source(args.path, base=args.base)
    report = verify_source(src, jobs=args.jobs)
    print_report(report, sys.stdout, as_json=args.json)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def _stat(args: argparse.Namespace) -> int:
    from store.log.source import open_source
    from store.tools.stat import collect_stat, print_stat

    print_stat(collect_stat(open_source(args.path, base=args.base), full=args.full), sys.stdout, as_json=args.json)
    return EXIT_OK


def _get(args: argparse.Namespace) -> int:
    from store.log.source import open_source
    from store.tools.get import get_message, print_message

    src = open_source(args.path, base=args.base)
    found = get_message(src, offset=args.offset, msg_id=args.msg_id, topic=args.topic, queue_id=args.queue,
                        queue_offset=args.queue_offset)
    print_message(found, sys.stdout, as_json=args.json)
    return EXIT_OK


def _clean(args: argparse.Namespace) -> int:
    from store.tools.clean import run_clean

    return run_clean(args.store, dry_run=args.dry_run, out=sys.stdout, as_json=args.json,
                     reserved_hours=args.reserved_hours, manual=args.now)


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register the store subcommands."""
    path_help = "a store directory, a commit-log directory, or one segment file"

    p = sub.add_parser("dump", help="print every record (messages, BLANKs, errors) in commit-log order")
    p.add_argument("path", help=path_help)
    p.add_argument("--from", dest="from_offset", type=_int, default=None,
                   help="start at this global offset (the first record at or after it)")
    p.add_argument("--topic", default=None, help="only messages of this topic")
    p.add_argument("--queue", type=int, default=None, help="only messages of this queue id")
    p.add_argument("--limit", type=int, default=None, help="stop after N messages")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line, in the golden *.decoded.jsonl form")
    p.add_argument("--base", type=_int, default=None,
                   help="start offset of a single segment file (default: its 20-digit name, else 0)")
    p.set_defaults(func=_guard(_dump))

    p = sub.add_parser("verify", help="check every record, BLANK, segment, queue offset and consume-queue "
                                      "unit; exit 0 clean, 1 problems, 2 unreadable")
    p.add_argument("path", help=path_help)
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    p.add_argument("--base", type=_int, default=None, help="start offset of a single segment file")
    p.add_argument("--jobs", type=int, default=None,
                   help="segments verified in parallel processes (default: the CPUs, up to 4, for stores "
                        "over 256 MB)")
    p.set_defaults(func=_guard(_verify))

    p = sub.add_parser("stat", help="segments, offsets, topics and queues, checkpoint")
    p.add_argument("path", help=path_help)
    p.add_argument("--full", action="store_true", help="scan every segment (message counts); default: "
                                                       "only the newest, older ones are full")
    p.add_argument("--json", action="store_true", help="as one JSON object")
    p.add_argument("--base", type=_int, default=None, help="start offset of a single segment file")
    p.set_defaults(func=_guard(_stat))

    p = sub.add_parser("get", help="one message in full, by offset, msgId or queue position")
    p.add_argument("path", help=path_help)
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--offset", type=_int, help="global commit-log offset of the record")
    how.add_argument("--msg-id", help="offset message id (32 or 56 hex chars)")
    how.add_argument("--topic", help="with --queue and --queue-offset: through the consume queue")
    p.add_argument("--queue", type=int, default=None)
    p.add_argument("--queue-offset", type=int, default=None)
    p.add_argument("--json", action="store_true", help="on one line (default: indented)")
    p.add_argument("--base", type=_int, default=None, help="start offset of a single segment file")
    p.set_defaults(func=_guard(_get))

    p = sub.add_parser("clean", help="apply retention now: delete expired commit-log segments and their "
                                     "consume-queue files (RocketMQ's CleanCommitLogService rules)")
    p.add_argument("store", help="a store directory")
    p.add_argument("--dry-run", action="store_true", help="only print what would be deleted")
    p.add_argument("--json", action="store_true", help="the plan as one JSON object")
    p.add_argument("--reserved-hours", type=float, default=None,
                   help="override file_reserved_time_h (default 72)")
    p.add_argument("--now", action="store_true",
                   help="delete expired segments now, whatever the hour and disk usage (manual delete)")
    p.set_defaults(func=_guard(_clean))

