"""The end-to-end fault sweep's commands, its starting data and its judge of one case, shared by
tests/e2e/crash/test_fault_sweep_e2e_replay.py and tests/e2e/crash/test_fault_sweep_e2e_run.py (two modules so that two
test workers can take them).

Each case starts from the same store (and checkpoint) holding the first records and runs the
command over more, in batches, rolling a segment, a consume-queue file and an IndexFile. It must
end with one line naming the failed call and a file of ours and exit 2, or complete (the call was
one whose failure is harmless: the case says which); never a traceback. What the store then serves
is, per partition, a prefix with no record twice (a batch whose commit failed is not served); the
same command run again completes, ``verify`` clean, and holds every record exactly once.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.helpers.faults.e2e import KINDS, Case, all_syscalls, copy_state, count_calls, inject_args, judge, our_paths, \
    sample_cases, strace_base, traced
from tests.helpers.brokers.kafka_records import store_by_coordinates

ROOT = Path(__file__).resolve().parents[3]
SEED = 56
# more cases per kind for a longer sweep, e.g. COMMITLOG_FAULT_E2E_PER_KIND=4
PER_KIND = int(os.environ.get("COMMITLOG_FAULT_E2E_PER_KIND", "1"))
FIRST = 200                   # records of partition 0 in the starting store
MORE = {0: range(FIRST, 500), 1: range(0, 100)}     # what each case writes: 4 batches, a new queue
# the kinds of call Spark makes on its checkpoint's files and the job on the spool's that -P can
# confine: Spark writes and renames a temporary file named by a UUID, which no -P path names
RUN_KINDS = ("openat", "write", "mkdir", "unlink")
STORE_ARGS = ["--segment-size", "32k", "--consume-queue-units", "100", "--max-offsets-per-trigger", "100",
              "--message-index", "true", "--max-hash-slot-num", "64", "--max-index-num", "400"]


def export(directory: Path, partition: int, offsets: range) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"key": base64.b64encode(b"k%d-%d" % (partition, o)).decode(),
             "value": base64.b64encode(b"v%d-%d" % (partition, o) * 20).decode(), "topic": "orders",
             "partition": partition, "offset": o, "timestamp": "2026-11-22T10:00:00.000Z", "timestampType": 0,
             "headers": []} for o in offsets]
    with open(directory / f"orders-{partition}.jsonl", "a") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))


def replay_cmd(store: Path, files: Path) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "replay", "--from-files", str(files), "--format", "jsonl",
            "--store", str(store), "--progress", "none", *STORE_ARGS]


def run_cmd(bootstrap: str, topic: str, store: Path, checkpoint: Path) -> list[str]:
    return [sys.executable, "-m", "ingest.cli", "run", "--bootstrap-servers", bootstrap, "--subscribe", topic,
            "--store", str(store), "--checkpoint", str(checkpoint), "--trigger", "available-now",
            "--master", "local[1]", "--shuffle-partitions", "1", *STORE_ARGS]


def plain(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)


def served_prefix(case: Case, store: Path, want: list[int]) -> None:
    """Per partition, the store serves offsets [0, k) once each: a batch not committed is not served."""
    found = store_by_coordinates(str(store))
    twice = [k for k, v in found.items() if len(v) != 1]
    if twice:
        case.problems.append(f"served twice after the failure: {sorted(twice)[:5]}")
    for partition in want:
        held = sorted(o for (_, p, o) in found if p == partition)
        if held != list(range(len(held))):
            case.problems.append(f"partition {partition} serves a gap after the failure: {held[:3]}..{held[-3:]}")


def exactly_once(case: Case, store: Path, expected: list[tuple[str, int, int]]) -> None:
    found = store_by_coordinates(str(store))
    if [k for k, v in found.items() if len(v) != 1]:
        case.problems.append("stored twice after the next run")
    if sorted(found) != sorted(expected):
        case.problems.append(f"after the next run {len(found)} records, {len(expected)} expected")


def one_case(case: Case, command: str, cmd_in: Callable[[Path], list[str]], base: Path, paths: set[str],
             expected: list[tuple[str, int, int]], tmp: Path) -> Case:
    """``case`` on a copy of ``base``: the command failed once, judged, then run again."""
    where = tmp / case.name.replace(":", "_").replace("=", "")
    copy_state(base, where)
    store, log = where / "store", where / "strace.log"
    cmd = cmd_in(where)
    done = traced(cmd, strace_base(log) + inject_args(case, paths, where), ROOT)
    case.code, case.said = done.returncode, done.stdout + done.stderr
    case.injected = [ln for ln in log.read_text().splitlines() if "(INJECTED)" in ln]
    judge(case, command, where)
    if case.injected and not case.problems:
        served_prefix(case, store, sorted({p for (_, p, _) in expected}))
        if case.code == 0:      # it completed: what it stored is checked as a next run's would be
            exactly_once(case, store, expected)
            return _tidy(case, where)
        again = plain(cmd)
        said = again.stdout + again.stderr
        if again.returncode != 0 or (command == "replay" and "verify: OK" not in said):
            case.problems.append(f"the next run: exit {again.returncode}: {said[-1500:]}")
        exactly_once(case, store, expected)
        if command == "run":
            checked = plain([sys.executable, "-m", "ingest.cli", "verify", str(store)])
            if checked.returncode != 0:
                case.problems.append(f"verify: {checked.stdout[-800:]}")
    return _tidy(case, where)


def _tidy(case: Case, where: Path) -> Case:
    if not case.problems:       # a failed case's files stay for a look
        shutil.rmtree(where, ignore_errors=True)
    return case


def sweep(command: str, cmd_in: Callable[[Path], list[str]], base: Path, roots: tuple[str, ...],
          expected: list[tuple[str, int, int]], tmp: Path, kinds: tuple[str, ...] = tuple(KINDS)) -> None:
    """Discover our files and their calls in a traced run on a copy of ``base``, then fail a seeded
    sample of them, two cases at a time; every case judged."""
    started = time.monotonic()
    seen, log = tmp / "seen", tmp / "seen.strace"
    copy_state(base, seen)
    done = traced(cmd_in(seen), strace_base(log) + ["-e", "trace=" + all_syscalls()], ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    paths = our_paths(log, seen, roots, base)
    calls = count_calls(log, seen, paths)
    cases = sample_cases(calls, random.Random(SEED), PER_KIND, kinds)
    with ThreadPoolExecutor(2) as pool:
        done_cases = list(pool.map(lambda c: one_case(c, command, cmd_in, base, paths, expected, tmp), cases))
    per_kind = Counter(c.kind for c in done_cases)
    print(f"\n{command}: {len(done_cases)} cases in {time.monotonic() - started:.0f} s; {len(paths)} paths; calls "
          f"on them {dict(calls)}; cases per kind {dict(per_kind)}\n"
          + "\n".join(f"  {c.name}: {c.outcome}" for c in done_cases))
    failed = [f"{c.name}: {'; '.join(c.problems)}" for c in done_cases if c.problems]
    assert not failed, f"{len(failed)} of {len(done_cases)} cases:\n" + "\n".join(failed)
