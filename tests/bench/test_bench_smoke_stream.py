"""The streaming benchmarks' quick mode, as tests/bench/test_bench_smoke.py runs the others (a module of
their own so that make test's two workers share the smoke runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.bench_runs import STREAM_SCRIPTS, quick_run_prints_its_figures

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=4.2)]


@pytest.mark.parametrize("script", STREAM_SCRIPTS)
def test_quick_mode_prints_the_figures_as_json(script: str, tmp_path: Path) -> None:
    quick_run_prints_its_figures(script, tmp_path)
