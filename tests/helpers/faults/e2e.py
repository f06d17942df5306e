"""System calls of a whole command (``replay``, ``run``) failed under ``strace -e inject``, confined to
our files, for tests/helpers/faults/e2e_sweep.py.

A first traced run with ``-y`` (no injection) tells which files of the store, its spool and the Spark
checkpoint the command touches, and how many calls of each kind each thread makes on them. Only the
files whose names come again in the next run on the same starting state are given to strace as
``-P`` paths (a spool file's name is random, Spark's temporary files carry a UUID and a new IndexFile
a timestamp: their writes cannot be named beforehand, only their directory's calls: the
``openat(dirfd, name)`` and ``unlinkat(dirfd, name)`` of the spool, Spark's ``rename`` onto its final
name). The N of each case is drawn, seeded, from those counts: strace counts ``when=N`` in each
thread apart, and only among the calls its ``-P`` paths let through.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# the kinds of call failed, each with the system calls that make it
KINDS: dict[str, tuple[str, ...]] = {
    "openat": ("openat",), "write": ("write",), "pwrite64": ("pwrite64",), "fallocate": ("fallocate",),
    "ftruncate": ("ftruncate",), "msync": ("msync",), "fsync": ("fsync",), "fdatasync": ("fdatasync",),
    "rename": ("rename",), "unlink": ("unlink", "unlinkat", "rmdir"), "mkdir": ("mkdir",)}
ERRORS = ("EIO", "ENOSPC", "EDQUOT", "EROFS")
# calls that name no file (msync takes an address): -P lets none through, so they are failed in every
# thread; only the store maps files and syncs them (Spark and Python do not)
UNNAMED = ("msync",)
SPARK_FAILED = ": the streaming query failed: "
# strace's name of a call -> the word our messages give it
SAID = {"openat": "open", "pwrite64": "pwrite", "unlinkat": "unlink", "rmdir": "unlink"}
# names that are new in every run: a spool file, Spark's temporary file, an IndexFile made now
_UNPREDICTABLE = (re.compile(r"[0-9a-f]{12}\.[0-9a-f]{32}\.arrow$"),
                  re.compile(r"\.[^/]*[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.tmp$"),
                  re.compile(r"(^|/)index/\d{17}(\.tmp)?$"))
_LINE = re.compile(r"^(\d+)\s+(\w+)\((.*)$")
_FD_PATH = re.compile(r"(?<!AT_FDCWD)<(/[^>]*)>")
_STR_PATH = re.compile(r'"(/[^"]*)"')


def strace_base(log: Path) -> list[str]:
    # --seccomp-bpf: the JVM's and Python's other calls never stop in strace (a run otherwise takes minutes)
    return ["strace", "-f", "-qq", "-y", "--seccomp-bpf", "-e", "signal=none", "-o", str(log)]


def all_syscalls() -> str:
    return ",".join(s for calls in KINDS.values() for s in calls)


def _arg_paths(call: str, rest: str) -> list[str]:
    """The paths of a call's arguments that strace's -P matches (a descriptor's, a path string; of a
    rename only the old name: strace 6.1 lets ``rename(tmp, final)`` through for ``-P tmp`` alone)."""
    args = rest.rsplit(") = ", 1)[0] if ") = " in rest else rest
    paths = _FD_PATH.findall(args) + _STR_PATH.findall(args)
    return paths[:1] if call == "rename" else paths


def our_paths(log: Path, where: Path, roots: tuple[str, ...], base: Path) -> set[str]:
    """The paths under ``roots`` (directories relative to ``where``, the traced run's copy of
    ``base``) that the calls in ``log`` name and that a run from ``base`` names again: relative to
    ``where`` (an IndexFile that exists in ``base`` keeps its name)."""
    out: set[str] = set()
    tops = [str(where / r) for r in roots]
    for line in log.read_text().splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        for path in _arg_paths(m.group(2), m.group(3)):
            if any(path == t or path.startswith(t + "/") for t in tops):
                rel = path[len(str(where)) + 1:]
                if not any(p.search(rel) for p in _UNPREDICTABLE) or (base / rel).exists():
                    out.add(rel)
    return out


def count_calls(log: Path, where: Path, paths: set[str]) -> Counter[str]:
    """Per system call, the most calls one thread makes that ``-P`` with ``paths`` lets through (a
    call matches when a path its arguments name is one of them, as strace's -P does)."""
    wanted = {str(where / p) for p in paths}
    per_thread: Counter[tuple[str, str]] = Counter()
    for line in log.read_text().splitlines():
        m = _LINE.match(line)
        if m and (m.group(2) in UNNAMED or any(p in wanted for p in _arg_paths(m.group(2), m.group(3)))):
            per_thread[m.group(2), m.group(1)] += 1
    calls: Counter[str] = Counter()
    for (call, _), n in per_thread.items():
        calls[call] = max(calls[call], n)
    return calls


@dataclass
class Case:
    kind: str
    call: str
    error: str
    n: int
    code: int = 0
    said: str = ""
    injected: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outcome: str = ""

    @property
    def name(self) -> str:
        return f"{self.call}:{self.error}:when={self.n}"


def sample_cases(calls: Counter[str], rng: random.Random, per_kind: int, kinds: tuple[str, ...] = tuple(KINDS)
                 ) -> list[Case]:
    """``per_kind`` cases of each kind with calls: a system call of the kind, an N among its calls
    (the first call for the first case of a kind, then drawn), an error, all seeded."""
    cases = []
    for kind in kinds:
        made = [c for c in KINDS[kind] if calls[c]]
        if not made:
            continue
        for i in range(per_kind):
            call = rng.choice(made)
            n = 1 if i == 0 and rng.random() < 0.3 else rng.randint(1, calls[call])
            cases.append(Case(kind, call, rng.choice(ERRORS), n))
    return cases


def inject_args(case: Case, paths: set[str], root: Path) -> list[str]:
    confine = [] if case.call in UNNAMED else [a for p in sorted(paths) for a in ("-P", str(root / p))]
    return [*confine, "-e", f"trace={case.call}", "-e", f"inject={case.call}:error={case.error}:when={case.n}"]


def judge(case: Case, command: str, our_root: Path) -> None:
    """One line naming the failed call and one of our files, exit 2; or exit 0 (a call whose failure
    is harmless); never a traceback."""
    p = case.problems
    if not case.injected:
        p.append("nothing was injected (fewer calls than counted)")
        return
    if "Traceback" in case.said or case.code not in (0, 2):
        p.append(f"exit {case.code}: {case.said.strip()[-1500:]}")
        return
    if case.code == 0:
        case.outcome = "completed after " + case.injected[0][:200]
        return
    errors = [ln for ln in case.said.splitlines() if ln.startswith(f"commitlog {command}: error: ")]
    if len(errors) != 1:
        p.append(f"{len(errors)} error lines: {case.said.strip()[-1500:]}")
        return
    case.outcome = errors[0]
    if str(our_root) not in errors[0]:
        p.append(f"the error names none of our files: {errors[0]}")
    word = SAID.get(case.call, case.call)
    # Spark's own I/O errors name the file, never the call (Java's File.list gives null, no errno)
    if SPARK_FAILED not in errors[0] and not re.search(rf"\b{word}\b", errors[0]):
        p.append(f"the error does not name the failed call ({word}): {errors[0]}")


def copy_state(base: Path, to: Path) -> None:
    shutil.copytree(base, to, symlinks=True)


def traced(cmd: list[str], strace: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*strace, "--", *cmd], capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
