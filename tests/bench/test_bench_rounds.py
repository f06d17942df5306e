"""bench/common.rounds: the modes a ratio compares take turns, so that a drift in a shared machine's
speed falls on each of them alike."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import common  # noqa: E402


def test_each_mode_runs_once_a_round_in_an_order_that_rotates() -> None:
    calls: list[str] = []

    def mode(name: str):
        def run() -> float:
            calls.append(name)
            return float(len(calls))
        return run

    timed = common.rounds({"off": mode("off"), "on": mode("on"), "found": mode("found")}, runs=3, warmup=1)
    assert calls == ["off", "on", "found", "on", "found", "off", "found", "off", "on", "off", "on", "found"]
    # the warm-up round is left out: each keeps its last three measurements, in order
    assert timed == {"off": [6.0, 8.0, 10.0], "on": [4.0, 9.0, 11.0], "found": [5.0, 7.0, 12.0]}
