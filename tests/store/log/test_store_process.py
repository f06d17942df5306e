"""Behaviour across processes: one writer per store, running out of disk space."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store import MessageStore, StoreConfig, StoreLockedError

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
SEG = 128 * 1024


def run_child(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_a_second_writer_in_another_process_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    root = tmp_path / "s"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys
            from store import MessageStore, StoreConfig
            s = MessageStore.open(sys.argv[1], StoreConfig(segment_size=65536))
            print("ready", flush=True)
            sys.stdin.readline()
            s.close()
        """), str(root)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLockedError, match=f"process {holder.pid}") as e:
            MessageStore.open(root, StoreConfig(segment_size=65536))
        assert e.value.pid == holder.pid
    finally:
        holder.communicate("\n", timeout=30)
    with MessageStore.open(root, StoreConfig(segment_size=65536)) as s:   # free again
        assert s.committed_offset == 0


def test_running_out_of_file_space_is_a_clear_error_and_the_store_reopens_consistent(tmp_path: Path) -> None:
    """RLIMIT_FSIZE below the segment size: the next segment cannot be created. The append
    fails before writing anything, the store stays usable, and reopens at its last commit."""
    root = tmp_path / "s"
    child = run_child("""
        import resource, signal, sys
        from store import Message, MessageStore, SegmentAllocationError, StoreConfig
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # get EFBIG instead of being killed
        s = MessageStore.open(sys.argv[1], StoreConfig(segment_size=%d, preallocate=True,
                                                      consume_queue_units=1000))
        batch = [Message(topic="D", body=bytes(1000)) for _ in range(20)]
        s.append(batch)
        s.commit(metadata={"n": 20})
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
        n = 20
        try:
            for _ in range(1000):
                s.append(batch)
                n += 20
                s.commit(metadata={"n": n})
        except SegmentAllocationError as e:
            print("ERROR", type(e).__name__, e, flush=True)
        print("COMMITTED", s.committed_offset, s.last_commit.metadata["n"], flush=True)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        s.append([Message(topic="D", body=b"still writable")])   # space is back: usable again
        s.commit(metadata={"n": n + 1})
        print("FINAL", s.committed_offset, flush=True)
        s.close()
    """ % SEG, str(root))
    assert child.returncode == 0, child.stderr
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in child.stdout.splitlines()}
    assert "SegmentAllocationError" in lines["ERROR"]
    assert "File too large" in lines["ERROR"] and "nothing of this batch was written" in lines["ERROR"]
    final = int(lines["FINAL"])
    with MessageStore.open(root, StoreConfig(segment_size=SEG, consume_queue_units=1000)) as s:
        assert s.committed_offset == s.max_offset == final
        n = s.last_commit.metadata["n"]
        bodies = [m.body.tobytes() for _, m in s.iter_messages()]
        assert bodies == [bytes(1000)] * (n - 1) + [b"still writable"]
        assert s.next_queue_offsets() == {("D", 0): n}
    committed, n_committed = map(int, lines["COMMITTED"].split())
    assert committed < final and n_committed == n - 1   # the failed batch left no trace
