"""``commitlog clean STORE [--dry-run]``: apply the retention rules now, from the command line."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import TextIO

from store.errors import StoreLockedError
from store.retention import CleanPlan, RetentionConfig, execute_plan, plan_clean


def run_clean(store: str | Path, *, dry_run: bool, out: TextIO, as_json: bool = False,
              reserved_hours: float | None = None, manual: bool = False,
              config: RetentionConfig | None = None, now: float | None = None, disk_usage=shutil.disk_usage) -> int:
    """Plan (and unless ``dry_run`` carry out) one clean pass. Deleting needs the writer's lock:
    a running writer cleans its own store with its RetentionService."""
    from store.log.lock import StoreLock
    from store.read.view import SourceError, open_view

    root = Path(store)
    src = open_view(root)
    if src.kind != "store":
        raise SourceError(f"{root} is not a store directory (clean works on a whole store)")
    config = config or RetentionConfig()
    if reserved_hours is not None:
        config.file_reserved_time_h = reserved_hours
    now = time.time() if now is None else now
    lock = None
    if not dry_run:
        lock = StoreLock(root)
        try:
            lock.acquire()
        except StoreLockedError:
            print("a running writer cleans its own store (RetentionService); "
                  "`commitlog clean --dry-run` shows the plan", file=sys.stderr)
            raise
    try:
        plan = plan_clean(root, config, now, disk_usage, committed_offset=src.committed_end(), manual=manual)
        if not dry_run:
            execute_plan(plan)
    finally:
        if lock is not None:
            lock.release()
    print_plan(plan, out, dry_run, as_json)
    return 0


def print_plan(plan: CleanPlan, out: TextIO, dry_run: bool, as_json: bool) -> None:
    if as_json:
        out.write(json.dumps({**plan.to_json(), "dryRun": dry_run}, ensure_ascii=False) + "\n")
        return
    verb = "would delete" if dry_run else "deleted"
    out.write(f"disk {plan.usage_ratio:.1%} used; delete hour: {'yes' if plan.time_up else 'no'}; "
              f"over 75%: {'yes' if plan.space_full else 'no'}; over 85%: {'yes' if plan.clean_immediately else 'no'}; "
              f"over 90% (writes refused): {'yes' if plan.disk_full else 'no'}; "
              f"last commit at {plan.committed_offset}\n")
    if not plan.segments:
        out.write(f"nothing to delete ({plan.stopped_at})\n")
        return
    for s in plan.segments:
        out.write(f"{verb} segment {s.path.name} ({s.size:,} bytes, {s.age_h:.1f} h old, {s.reason})\n")
    for p in plan.consume_queue_files:
        out.write(f"{verb} consume-queue file {p.parent.parent.name}/{p.parent.name}/{p.name}\n")
    out.write(f"commit log now starts at {plan.min_offset_after} (was {plan.min_offset_before}); "
              f"stopped: {plan.stopped_at}\n")
