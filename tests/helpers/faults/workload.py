"""The small store workload the fault sweep (tests/e2e/crash/test_fault_sweep.py) fails one system call of.

``python -m tests.helpers.faults.workload write STORE [--wait]`` opens a MessageStore on STORE (64 KiB
segments, the index on, small IndexFiles), appends BATCHES batches with a commit after each (the
commit log rolls its segment and the index its file on the way) and prints one JSON line: the
batches whose commit returned, the error (class, message) if one was raised, whether a commit
of the same batch succeeded after it (which only an error saying nothing was written may allow), and whether the store closed cleanly. A StoreError ends it with one
line on stderr and exit 2; anything else escapes as a traceback (exit 1), which the sweep counts
as a defect. With ``--wait`` it first runs the same workload on a scratch store (so every lazy
import and first-use file is done), prints ``ready``, and waits for a line on stdin: strace
attaches in between, so its call counts are the workload's and not the interpreter's start.

``python -m tests.helpers.faults.workload resume STORE`` opens STORE again, as the sink does after a
failure: it reads which batch the last commit point records (its metadata), appends every later
batch, commits, and prints one JSON line with the batches visible before it appended, how many
times each key is stored after, and the verify report (``commitlog verify --json``).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

BATCHES = 5
PER_BATCH = 60
BODY = 250


def config() -> Any:
    from store import IndexConfig, StoreConfig

    return StoreConfig(segment_size=64 << 10, preallocate=False, consume_queue_units=100,
                       index=IndexConfig(True, 64, 200))


def batch(number: int) -> list[Any]:
    """Two queues, a key per message (``b<batch>-<n>``): keys count the records stored."""
    from store import Message

    return [Message("T", bytes([65 + number]) * BODY, queue_id=n % 2,
                    properties=f"KEYS\x01b{number}-{n}\x02")
            for n in range(PER_BATCH)]


def write(root: Path) -> tuple[dict[str, Any], int]:
    from store import MessageStore, StoreError

    out: dict[str, Any] = {"committed": [], "error": None, "error_class": None, "later_commit": None,
                           "closed_cleanly": None, "close_error": None}
    store = None
    try:
        store = MessageStore.open(root, config())
    except StoreError as e:
        out["error"], out["error_class"] = str(e), type(e).__name__
    for b in range(BATCHES if store is not None else 0):
        try:
            store.append(batch(b))
            store.commit(metadata={"batch": b})
        except StoreError as e:
            out["error"], out["error_class"] = str(e), type(e).__name__
            # the same batch again: a store that failed must refuse it, unless its error says
            # nothing was written and a retry is fine (a segment that could not be created)
            try:
                store.append(batch(b))
                store.commit(metadata={"batch": b})
                out["later_commit"] = True
            except StoreError:
                out["later_commit"] = False
                break
        out["committed"].append(b)
    if store is not None:
        try:
            store.close()
        except StoreError as e:
            out["close_error"] = f"{type(e).__name__}: {e}"
        out["closed_cleanly"] = store.closed_cleanly
    return out, 2 if out["error"] or out["close_error"] else 0


def resume(root: Path) -> dict[str, Any]:
    from ingest.cli import main as commitlog
    from store import MessageStore, StoreReader

    with StoreReader.open(root) as reader:
        before = sorted({int(m.properties["KEYS"].split("-")[0][1:]) for _, m in reader.iter_messages()})
    with MessageStore.open(root, config()) as store:
        last = store.last_commit.metadata.get("batch", -1) if store.last_commit else -1
        for b in range(last + 1, BATCHES):
            store.append(batch(b))
            store.commit(metadata={"batch": b})
    with StoreReader.open(root) as reader:
        keys = Counter(m.properties["KEYS"] for _, m in reader.iter_messages())
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        code = commitlog(["verify", "--json", str(root)])
    report = json.loads(said.getvalue())
    return {"visible_before": before, "resumed_after": last, "keys": len(keys),
            "twice": sorted(k for k, n in keys.items() if n != 1),
            "missing": BATCHES * PER_BATCH - len(keys), "verify_exit": code,
            "verify_problems": report.get("problems", [])[:5]}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("write", "resume"):
        print("usage: python -m tests.helpers.faults.workload write|resume STORE [--wait]", file=sys.stderr)
        return 2
    root = Path(argv[1])
    if argv[0] == "resume":
        print(json.dumps(resume(root)))
        return 0
    if "--wait" in argv[2:]:
        scratch = root.with_name(root.name + ".warm")
        write(scratch)
        shutil.rmtree(scratch)
        print("ready", flush=True)
        sys.stdin.readline()
    out, code = write(root)
    print(json.dumps(out), flush=True)
    if out["error"] or out["close_error"]:
        print(f"fault_workload: error: {out['error'] or out['close_error']}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
