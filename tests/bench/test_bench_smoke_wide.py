"""bench/wide.py's quick mode, as tests/bench/test_bench_smoke.py runs the others: a module of its own (it
starts its own Apache Kafka and runs several Spark jobs), so that make test's two workers balance."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.bench_runs import quick_run_prints_its_figures

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=4.0)]


def test_quick_mode_prints_the_figures_as_json(tmp_path: Path) -> None:
    quick_run_prints_its_figures("wide", tmp_path)
