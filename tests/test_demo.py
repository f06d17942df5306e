"""`make demo` end to end, smaller: its own broker and job, the bad events dead-lettered, the
awkward headers read back from KAFKA_HEADERS, verify clean. The demo's idea of a bad event must
follow the mapping's rules; this is where a change of those rules shows. Then RocketMQ 4.9's own
DefaultLitePullConsumer, through a 4.9 broker on the demo's store, gets every message of it (issue 35:
it stalled on the empty bodies stores used to hold)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ingest.devtools.demo import TOPICS
from tests.rocketmq import RocketBroker, clients

pytestmark = pytest.mark.integration


def test_the_demo_runs_clean(tmp_path: Path, rocketmq_nameservers: object) -> None:
    result = subprocess.run([sys.executable, "-m", "ingest.devtools.demo", "--events", "6000",
                             "--store", str(tmp_path / "demo-store"), "--timeout", "240"],
                            capture_output=True, text=True, timeout=420, cwd=tmp_path)
    assert result.returncode == 0 and "demo: OK: 5991 messages, 9 dead letters, verify clean" in result.stdout, (
        f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    assert "messages with their headers in KAFKA_HEADERS" in result.stdout
    assert ", 0 empty bodies" in result.stdout

    ns = rocketmq_nameservers.get("4")  # type: ignore[attr-defined]
    with RocketBroker.start(tmp_path / "demo-store", ns, "4"):
        rows = clients("4").run("lite", ns.address, "demo-lite", "5991", "4000", *TOPICS)
    coords = Counter((r["properties"]["KAFKA_TOPIC"], r["properties"]["KAFKA_PARTITION"],
                      r["properties"]["KAFKA_OFFSET"]) for r in rows)
    assert len(coords) == 5991 and set(coords.values()) == {1}, (len(rows), len(coords))
    assert all(r["body"] for r in rows)
