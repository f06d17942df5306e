"""The store commands: dump, verify, stat, get, reindex, clean. All but ``reindex`` and ``clean`` are
read-only and safe while a writer runs (they read up to the last commit); those two take the
writer's lock."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from store.errors import StoreError
from store.failed_call import describe_failure
from store.format.constants import DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM

if TYPE_CHECKING:
    from store.tools.verify_behind import CheckedSegment

EXIT_OK, EXIT_PROBLEMS, EXIT_UNREADABLE = 0, 1, 2


class UsageError(StoreError):
    """Options that do not go together, or a value out of range: exit 2."""


def parse_time(text: str | None, name: str) -> int | None:
    """Epoch milliseconds, or an ISO 8601 time (local time when it names no zone)."""
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise UsageError(f"{name} {text!r}: give epoch milliseconds or an ISO 8601 time such as "
                         f"2026-11-25T10:00:00") from None


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
            print(f"commitlog {args.command}: {describe_failure(e)}", file=sys.stderr)
            return EXIT_UNREADABLE
    return wrapped


def _dump(args: argparse.Namespace) -> int:
    from store.read.view import open_view
    from store.tools.dump import run_dump

    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit {args.limit}: give 1 or more messages (leave it out for all)")
    src = open_view(args.path, base=args.base)
    return run_dump(src, sys.stdout, from_offset=args.from_offset, topic=args.topic, queue_id=args.queue,
                    limit=args.limit, as_json=args.json)


def _verify(args: argparse.Namespace) -> int:
    from store.tools.verify import reuse_freed_memory

    reuse_freed_memory()        # this process exits when the report is out
    return _verify_report(args)


def verify_store(path: str | os.PathLike[str], checked: Mapping[str, CheckedSegment] | None = None) -> int:
    """``commitlog verify PATH`` in this process (a command that goes on afterwards, as replay does):
    the same report on stdout and the same exit status; a store that cannot be read raises its
    StoreError or OSError to the caller, whose one line it becomes. ``checked``: what a VerifyBehind
    checked while the store was written (store.tools.verify_behind), not read again; what is read
    is handed back to the kernel behind the check, as the writer handed back its pages."""
    args = argparse.Namespace(command="verify", path=os.fspath(path), base=None, json=False, jobs=None)
    return _verify_report(args, checked)


def _verify_report(args: argparse.Namespace, checked: Mapping[str, CheckedSegment] | None = None) -> int:
    from store.read.view import open_view
    from store.tools.verify import print_report, verify_source

    src = open_view(args.path, base=args.base)
    report = verify_source(src, jobs=args.jobs, checked=checked, hand_back=checked is not None)
    print_report(report, sys.stdout, as_json=args.json)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def _stat(args: argparse.Namespace) -> int:
    from store.read.view import open_view
    from store.tools.stat import collect_stat, print_stat

    st = collect_stat(open_view(args.path, base=args.base), full=args.full)
    print_stat(st, sys.stdout, as_json=args.json)
    if st.problems:
        print(f"commitlog stat: {len(st.problems)} problem(s), the first at offset {st.problems[0]['offset']} "
              f"({st.problems[0]['kind']}); `commitlog verify {args.path}` checks everything", file=sys.stderr)
        return EXIT_PROBLEMS
    return EXIT_OK


def _get(args: argparse.Namespace) -> int:
    from store.read.view import open_view
    from store.tools.get import get_message, print_message

    if args.key is not None or args.uniq_key is not None:
        return _get_by_key(args)
    if args.queue is not None and (args.topic is None or args.queue_offset is None):
        raise UsageError("--queue needs --topic and --queue-offset")
    src = open_view(args.path, base=args.base)
    found = get_message(src, offset=args.offset, msg_id=args.msg_id, topic=args.topic, queue_id=args.queue,
                        queue_offset=args.queue_offset, decompress=args.decompress)
    print_message(found, sys.stdout, as_json=args.json)
    return EXIT_OK


def _get_by_key(args: argparse.Namespace) -> int:
    from store.tools.get import messages_by_key, print_message

    if args.topic is None:
        raise UsageError(f"--{'key' if args.key is not None else 'uniq-key'} needs --topic (keys are indexed "
                         f"per topic)")
    begin, end = parse_time(args.begin, "--begin"), parse_time(args.end, "--end")
    if begin is not None and end is not None and begin > end:
        raise UsageError(f"--begin {args.begin} is after --end {args.end}: the range is empty; give the earlier "
                         f"time to --begin")
    found = messages_by_key(args.path, args.topic, args.key if args.key is not None else args.uniq_key,
                            uniq=args.uniq_key is not None, max_num=args.max_num, begin_ms=begin, end_ms=end,
                            decompress=args.decompress)
    if not found:
        what = f"key {args.key!r}" if args.key is not None else f"uniq key {args.uniq_key!r}"
        print(f"commitlog get: no message of topic {args.topic!r} carries {what}", file=sys.stderr)
        return EXIT_PROBLEMS
    for f in found:
        print_message(f, sys.stdout, as_json=args.json)
    return EXIT_OK


def _reindex(args: argparse.Namespace) -> int:
    from store.index.service import IndexConfig
    from store.tools.reindex import print_reindex, reindex

    try:
        config = IndexConfig(True, args.max_hash_slot_num, args.max_index_num)
    except ValueError as e:
        raise UsageError(str(e)) from e
    result = reindex(args.store, config)
    return print_reindex(args.store, result, config, sys.stdout)


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
    how.add_argument("--queue", type=int, default=None,
                     help="with --topic and --queue-offset: through the consume queue")
    how.add_argument("--key", default=None,
                     help="with --topic: the messages with this key among their KEYS, through index/ "
                          "(mqadmin queryMsgByKey)")
    how.add_argument("--uniq-key", default=None,
                     help="with --topic: the message with this UNIQ_KEY (client msgId), through index/ "
                          "(mqadmin queryMsgByUniqueKey)")
    p.add_argument("--topic", default=None, help="the topic of --queue, --key or --uniq-key")
    p.add_argument("--queue-offset", type=int, default=None)
    p.add_argument("--begin", default=None, help="with --key/--uniq-key: stored at or after this time "
                                                 "(epoch milliseconds or ISO 8601, e.g. 2026-11-25T10:00)")
    p.add_argument("--end", default=None, help="with --key/--uniq-key: stored at or before this time")
    p.add_argument("--max-num", type=int, default=64,
                   help="with --key/--uniq-key: index entries looked at, at most (the broker's cap: 64)")
    p.add_argument("--decompress", action="store_true",
                   help="show a compressed body (sysFlag COMPRESSED) decompressed")
    p.add_argument("--json", action="store_true", help="on one line (default: indented)")
    p.add_argument("--base", type=_int, default=None, help="start offset of a single segment file")
    p.set_defaults(func=_guard(_get))

    p = sub.add_parser("reindex", help="build index/ (RocketMQ's IndexFiles, what key lookups use) from the "
                                       "commit log; takes the writer's lock")
    p.add_argument("store", help="a store directory")
    p.add_argument("--max-hash-slot-num", type=int, default=DEFAULT_MAX_HASH_SLOT_NUM,
                   help=f"hash slots per index file (maxHashSlotNum, default {DEFAULT_MAX_HASH_SLOT_NUM:,})")
    p.add_argument("--max-index-num", type=int, default=DEFAULT_MAX_INDEX_NUM,
                   help=f"items per index file (maxIndexNum, default {DEFAULT_MAX_INDEX_NUM:,})")
    p.set_defaults(func=_guard(_reindex))

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

