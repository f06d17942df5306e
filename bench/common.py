"""What every benchmark script shares: the command line, timing, the figures, machine facts,
and the records (generated with numpy from fixed seeds, so every run measures the same bytes).

Each script answers one question and measures, in the same run and on the same data, a ceiling
or a peer; ``Report`` prints the figures as a table (or, with ``--json``, as one JSON object
whose names are stable across versions, ratios included).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"
if str(REPO) not in sys.path:  # the scripts run as `python bench/x.py` from anywhere
    sys.path.insert(0, str(REPO))

SEED = 20260101
TOPIC = "BenchTopic"          # 10 bytes, as the issue asks
QUEUES = 4
SCHEMA_VERSION = 1


# --- command line --------------------------------------------------------------------------
def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true",
                   help="small sizes, under a minute: the smoke test `make test` runs")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object of the figures on stdout (the table goes to stderr)")
    p.add_argument("--runs", type=int, default=None,
                   help="measured runs per figure (default 3; the median is reported)")
    p.add_argument("--out", default=str(OUT_DIR),
                   help="scratch directory for stores and files (emptied after the run)")
    p.add_argument("--keep", action="store_true", help="leave the scratch files in --out")
    return p


def runs_of(args: argparse.Namespace, quick_default: int = 3) -> int:
    """Measured runs: --runs (at least 3 in full mode), else 3; ``quick_default`` in quick mode,
    where the scripts only prove they still run."""
    if args.runs:
        return args.runs if args.quick else max(3, args.runs)
    return quick_default if args.quick else 3


# --- figures -------------------------------------------------------------------------------
@dataclass
class Stat:
    """One figure over several runs."""

    values: list[float]
    unit: str

    @property
    def median(self) -> float:
        return float(statistics.median(self.values))

    @property
    def min(self) -> float:
        return float(min(self.values))

    @property
    def max(self) -> float:
        return float(max(self.values))

    def as_json(self) -> dict[str, Any]:
        return {"median": self.median, "min": self.min, "max": self.max, "unit": self.unit,
                "runs": len(self.values)}


@dataclass
class Report:
    """The figures of one script run, printed as a table or as one JSON object."""

    bench: str
    args: argparse.Namespace
    figures: dict[str, Stat] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    load_at_start: list[float] = field(default_factory=lambda: [round(x, 2) for x in os.getloadavg()])
    # the code measured is the code at the start: a long run may end after later commits
    revision: str = field(default_factory=lambda: git_revision())

    def add(self, name: str, values: Sequence[float] | float, unit: str) -> Stat:
        vals = [float(v) for v in (values if isinstance(values, Sequence) else [values])]
        st = Stat(vals, unit)
        self.figures[name] = st
        self.log(f"  {name:<58} {fmt(st.median):>12} {unit:<8} (min {fmt(st.min)}, max {fmt(st.max)}, "
                 f"n={len(vals)})")
        return st

    def ratio(self, name: str, numerator: str, denominator: str) -> float:
        """``numerator``'s median over ``denominator``'s median, under a stable name."""
        a, b = self.figures[numerator].median, self.figures[denominator].median
        r = a / b if b else float("nan")
        self.ratios[name] = r
        self.log(f"  {name:<58} {r:>12.3f} ratio    ({numerator} / {denominator})")
        return r

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.log(f"  note: {text}")

    def log(self, text: str) -> None:
        print(text, file=sys.stderr if self.args.json else sys.stdout, flush=True)

    def as_json(self) -> dict[str, Any]:
        return {
            "bench": self.bench,
            "schema": SCHEMA_VERSION,
            "mode": "quick" if self.args.quick else "full",
            "date": _dt.datetime.fromtimestamp(self.started, _dt.timezone.utc).isoformat(timespec="seconds"),
            "elapsed_s": round(time.time() - self.started, 1),
            "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name] + sys.argv),
            "git": self.revision,
            "machine": machine(self.args.out),
            # Other people's jobs share these 2 cores: a load above 2 means the figures are low.
            "loadavg_start": self.load_at_start,
            "params": self.params,
            "figures": {k: v.as_json() for k, v in self.figures.items()},
            "ratios": self.ratios,
            "notes": self.notes,
        }

    def finish(self) -> None:
        self.log(f"{self.bench}: done in {time.time() - self.started:.1f} s")
        if self.args.json:
            print(json.dumps(self.as_json(), indent=1, sort_keys=False), flush=True)


def fmt(x: float) -> str:
    if x != x:  # NaN
        return "nan"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.4f}"


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else float("nan")


# --- timing --------------------------------------------------------------------------------
@contextmanager
def timer() -> Iterator[list[float]]:
    """``with timer() as t: ...`` then ``t[0]`` is the elapsed seconds."""
    box: list[float] = []
    t0 = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - t0)


def repeat(fn: Callable[[], float], runs: int, warmup: int = 0) -> list[float]:
    """Call ``fn`` (which returns one measurement) ``warmup`` + ``runs`` times; keep the last ``runs``."""
    return rounds({"": fn}, runs, warmup)[""]


def rounds(fns: Mapping[str, Callable[[], float]], runs: int, warmup: int = 0) -> dict[str, list[float]]:
    """Call each of ``fns`` (which return one measurement) once a round, ``warmup`` + ``runs`` rounds,
    in an order that rotates from round to round; keep each one's last ``runs``. A ratio of two of
    them then compares runs taken minutes apart at most, not one block of runs against a later one:
    on a shared machine the speed drifts more between blocks than the ratio asked about."""
    names = list(fns)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + runs):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            took = fns[name]()
            if r >= warmup:
                out[name].append(took)
    return out


# --- machine -------------------------------------------------------------------------------
def _meminfo_kib(key: str) -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def disk_of(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Filesystem, device and free space under ``path`` (created if missing)."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(p)
    info: dict[str, Any] = {"path": str(p), "size_gib": round(usage.total / 2**30, 1),
                            "free_gib": round(usage.free / 2**30, 1)}
    try:
        out = subprocess.run(["df", "--output=source,fstype", str(p)], capture_output=True, text=True,
                             timeout=10).stdout.split("\n")[1].split()
        info["device"], info["fstype"] = out[0], out[1]
        dev = Path(out[0]).name.rstrip("0123456789") if out[0].startswith("/dev/") else ""
        rota = Path(f"/sys/block/{dev}/queue/rotational")
        if dev and rota.exists():
            info["rotational"] = rota.read_text().strip() == "1"
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    return info


def machine(out: str | os.PathLike[str] = OUT_DIR) -> dict[str, Any]:
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "")
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": cpu, "mem_gib": round(_meminfo_kib("MemTotal") / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version(), "disk": disk_of(out),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def git_revision() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def free_bytes(path: str | os.PathLike[str]) -> int:
    Path(path).mkdir(parents=True, exist_ok=True)
    return shutil.disk_usage(path).free


def peak_rss_bytes(pid: int | None = None) -> int:
    """Peak resident set (VmHWM) of a process; of this one by default."""
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return _status_kib(pid, "VmHWM") * 1024


def rss_bytes(pid: int | None = None, kind: str = "VmRSS") -> int:
    """Resident memory of a process: VmRSS (all), RssAnon (heap, stacks: what a batch costs) or
    RssFile (mapped files: the store's segments count here, and the kernel can drop them)."""
    return _status_kib(pid or os.getpid(), kind) * 1024


def _status_kib(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def child_pids(pid: int | None = None) -> list[int]:
    """Direct children of a process (Linux /proc)."""
    pid = pid or os.getpid()
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:         # the process has exited since it was listed
        return []
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return sorted(set(out))


# --- scratch space -------------------------------------------------------------------------
@contextmanager
def scratch(args: argparse.Namespace, name: str) -> Iterator[Path]:
    """A fresh directory under --out, removed afterwards (unless --keep)."""
    root = Path(args.out) / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


@contextmanager
def work_dir(path: Path, keep: bool) -> Iterator[Path]:
    """A script's scratch directory, removed afterwards with --out if that leaves it empty
    (unless --keep)."""
    try:
        yield path
    finally:
        if not keep:
            shutil.rmtree(path, ignore_errors=True)
            try:
                path.parent.rmdir()
            except OSError:
                pass


def write_fdatasync(fd: int, chunks: Sequence[Any]) -> None:
    """Write ``chunks`` one after another from the start of ``fd``, an fdatasync after each: the
    disk's speed for a batch a flush, the ceiling of a SYNC writer."""
    pos = 0
    for c in chunks:
        view = memoryview(c)
        while view:
            n = os.pwrite(fd, view, pos)
            pos += n
            view = view[n:]
        os.fdatasync(fd)


def drop_file_cache(path: str | os.PathLike[str]) -> None:
    """Evict a file's clean pages from the page cache (no root needed), for cold-read figures."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_tree_cache(root: str | os.PathLike[str]) -> None:
    for p in Path(root).rglob("*"):
        if p.is_file():
            try:
                drop_file_cache(p)
            except OSError:
                pass


def compile_java(source: Path, out: Path, classpath: str | None = None, extra: Sequence[Path] = ()) -> Path:
    """Compile one of our Java peers (``source`` and the ``extra`` sources beside it) with javac into
    ``out`` (under bench/out, gitignored), against ``classpath`` if given; returns the class path.
    Raises RuntimeError naming what is missing."""
    javac = shutil.which("javac")
    if not javac:
        raise RuntimeError("javac not found: the JVM peer needs a JDK 17 (the same one Spark uses)")
    out.mkdir(parents=True, exist_ok=True)
    cp = ["-cp", classpath] if classpath else []
    done = subprocess.run([javac, "-d", str(out), *cp, str(source), *map(str, extra)], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"javac {source} failed:\n{done.stderr}")
    return out


def python() -> str:
    return sys.executable


def env_for_subprocess() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    return env
