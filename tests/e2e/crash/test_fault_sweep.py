"""Every system call the store makes, failed in turn: the workload of tests/helpers/faults/workload.py (five
batches with a commit each, a segment roll, an IndexFile roll) runs under ``strace -e inject`` once
for every N of every call kind with EIO, and for a seeded sample of N with ENOSPC, EDQUOT and EROFS.

Each case: the writer ends with one line (a StoreError naming the store) and exit 2, or completes
because the failed call was one it may legitimately do without (said per case); after a failure
no later commit succeeds in that process; a reopen shows no batch whose commit did not return
(unless the failure came after the commit point's rename, which the message says); resuming from
the commit point's metadata stores every key exactly once; ``commitlog verify`` is clean.
"""

from __future__ import annotations

import glob
import json
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.programs import require_program
from tests.helpers.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=4)]   # 215 cases, ~4 min on 2 shared cores

ROOT = Path(__file__).resolve().parents[3]
KINDS = ("openat", "write", "pwrite64", "fallocate", "ftruncate", "msync", "fsync", "fdatasync", "rename",
         "unlink", "mkdir")
# strace's name of a call -> the name the store's messages give it
CALL_NAMES = {"openat": "open", "pwrite64": "pwrite"}
SAMPLED_ERRORS = ("ENOSPC", "EDQUOT", "EROFS")
SAMPLES_PER_KIND = 1
SEED = 56
# errors after which the batch may be appended again: nothing of it was written (a segment that
# could not be created), so the store stays writable and the retry either works or fails the same way
RETRYABLE = ("SegmentAllocationError",)


@dataclass
class Case:
    kind: str
    error: str
    n: int
    out: dict = field(default_factory=dict)
    said: str = ""
    code: int = 0
    injected: list[str] = field(default_factory=list)
    resumed: dict = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.error}:when={self.n}"


def _all_traced(pid: int) -> bool:
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            if "TracerPid:\t0\n" in Path(status).read_text():
                return False
        except FileNotFoundError:        # a thread that ended meanwhile
            continue
    return True


def traced_run(root: Path, strace_args: list[str], log: Path) -> tuple[int, str, str]:
    """The workload with strace attached after its warm-up (so N counts the workload's calls only)."""
    driver = subprocess.Popen([sys.executable, "-m", "tests.helpers.faults.workload", "write", str(root), "--wait"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT)
    assert driver.stdout is not None
    ready = driver.stdout.readline().strip()
    assert ready == "ready", ready + driver.stderr.read() if driver.stderr else ""
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-y", "-o", str(log), *strace_args, "-p", str(driver.pid)],
                              stderr=subprocess.PIPE, text=True)
    def attached() -> bool:                   # strace attaches each thread in turn
        assert tracer.poll() is None, "strace exited before it attached"
        return _all_traced(driver.pid)

    wait_until(attached, 30, "strace to attach every thread of the driver", interval_s=0.005)
    out, err = driver.communicate("\n", timeout=120)
    tracer.wait(timeout=60)
    return driver.returncode, out, err


def count_calls(tmp: Path) -> Counter[str]:
    """Per kind, the most calls one thread makes: strace counts ``when=N`` in each thread apart, so
    N from 1 to that number fails every call of the kind (the Nth of each thread that makes N)."""
    root, log = tmp / "count", tmp / "count.strace"
    code, out, err = traced_run(root, ["-e", "trace=" + ",".join(KINDS)], log)
    assert code == 0, out + err
    per_thread: Counter[tuple[str, str]] = Counter()
    for line in log.read_text().splitlines():
        m = re.match(r"(\d+)\s+(\w+)\(", line)
        if m and m.group(2) in KINDS:      # "<... resumed>" lines do not match: each call counts once
            per_thread[m.group(2), m.group(1)] += 1
    calls: Counter[str] = Counter()
    for (kind, _), n in per_thread.items():
        calls[kind] = max(calls[kind], n)
    return calls


def resume(root: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "tests.helpers.faults.workload", "resume", str(root)], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    if done.returncode != 0:
        return {"failed": done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]}
    return json.loads(done.stdout)


def run_case(case: Case, tmp: Path) -> Case:
    where = tmp / case.name.replace(":", "_").replace("=", "")
    where.mkdir()
    root, log = where / "store", where / "strace.log"
    case.code, out, case.said = traced_run(
        root, ["-e", f"trace={case.kind}", "-e", f"inject={case.kind}:error={case.error}:when={case.n}"], log)
    case.injected = [ln for ln in log.read_text().splitlines() if "(INJECTED)" in ln]
    lines = out.strip().splitlines()
    case.out = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    judge_run(case, root)
    if case.out and any(str(root) in ln for ln in case.injected):
        case.resumed = resume(root)
        judge_resume(case)
    shutil.rmtree(where, ignore_errors=True)
    return case


def judge_run(case: Case, root: Path) -> None:
    p = case.problems
    if not case.injected:
        p.append("nothing was injected (fewer calls than counted)")
    if case.injected and all(str(root) not in ln for ln in case.injected):
        return      # the driver's own output (its JSON line to the pipe), not a call of the store
    if "Traceback" in case.said or case.code not in (0, 2) or not case.out:
        p.append(f"exit {case.code}, not one line: {case.said.strip()[-600:]}")
        return
    if case.code == 2:
        errors = [ln for ln in case.said.splitlines() if ln.startswith("fault_workload: error: ")]
        if len(errors) != 1:
            p.append(f"{len(errors)} error lines: {case.said.strip()[-600:]}")
        if str(root) not in case.said:
            p.append(f"the error names no file of the store: {case.said.strip()}")
        call = CALL_NAMES.get(case.kind, case.kind)
        if not re.search(rf"\b{call}\b", case.said):
            p.append(f"the error does not name the failed call ({call}): {case.said.strip()}")
    if case.out.get("later_commit") and case.out.get("error_class") not in RETRYABLE:
        p.append(f"a commit succeeded after the failure ({case.out.get('error_class')})")


def judge_resume(case: Case) -> None:
    p, r = case.problems, case.resumed
    if "failed" in r:
        p.append(f"resuming failed: {r['failed']}")
        return
    unconfirmed = set(r["visible_before"]) - set(case.out["committed"])
    after_rename = "commit point" in (case.out.get("error") or "") and "written" in (case.out.get("error") or "")
    if unconfirmed and not after_rename:
        p.append(f"batches {sorted(unconfirmed)} visible though their commit did not return")
    if r["twice"] or r["missing"]:
        p.append(f"keys stored twice {r['twice'][:5]}, missing {r['missing']}")
    if r["verify_exit"] != 0:
        p.append(f"verify: {r['verify_problems']}")


def sweep_cases(calls: Counter[str]) -> list[Case]:
    rng = random.Random(SEED)
    cases = [Case(kind, "EIO", n) for kind in KINDS for n in range(1, calls[kind] + 1)]
    for error in SAMPLED_ERRORS:
        for kind in KINDS:
            picks = rng.sample(range(1, calls[kind] + 1), min(SAMPLES_PER_KIND, calls[kind]))
            cases += [Case(kind, error, n) for n in sorted(picks)]
    return cases


@pytest.mark.timeout(900)
def test_every_call_of_every_kind_failed_in_turn_leaves_a_store_that_resumes_exactly_once(tmp_path: Path) -> None:
    require_program("strace", "to fail the calls")
    started = time.monotonic()
    calls = count_calls(tmp_path)
    assert all(calls[k] > 0 for k in KINDS), f"the workload makes no call of some kinds: {calls}"
    cases = sweep_cases(calls)
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(lambda c: run_case(c, tmp_path), cases))
    completed = [c for c in done if c.code == 0 and not c.problems]
    per_kind = Counter(f"{c.kind}/{c.error}" for c in done)
    print(f"\n{len(done)} cases in {time.monotonic() - started:.0f} s; calls {dict(calls)}; per kind "
          f"{dict(per_kind)}; completed despite the failed call: "
          + "; ".join(f"{c.name} {c.injected[0][:160]}" for c in completed))
    failed = [f"{c.name}: {'; '.join(c.problems)}" for c in done if c.problems]
    assert not failed, f"{len(failed)} of {len(done)} cases:\n" + "\n".join(failed[:400])
