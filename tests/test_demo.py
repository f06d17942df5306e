"""`make demo` end to end, smaller: its own broker and job, the bad events dead-lettered, the
awkward headers read back from KAFKA_HEADERS, verify clean. The demo's idea of a bad event must
follow the mapping's rules; this is where a change of those rules shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_the_demo_runs_clean(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "ingest.demo", "--events", "6000",
                             "--store", str(tmp_path / "demo-store"), "--timeout", "240"],
                            capture_output=True, text=True, timeout=420, cwd=tmp_path)
    assert result.returncode == 0 and "demo: OK: 5991 messages, 9 dead letters, verify clean" in result.stdout, (
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    assert "messages with their headers in KAFKA_HEADERS" in result.stdout
