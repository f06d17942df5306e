"""Every benchmark script still runs: ``--quick --json`` exits 0 and prints one JSON object with
the figures and ratios BENCHMARKS.md is built from. Nothing here looks at a speed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.bench_runs import EXPECTED, OWN_MODULE_SCRIPTS, STREAM_SCRIPTS, quick_run_prints_its_figures

pytestmark = [pytest.mark.integration, pytest.mark.slow(minutes=2.9)]


@pytest.mark.parametrize("script", sorted(set(EXPECTED) - set(STREAM_SCRIPTS) - set(OWN_MODULE_SCRIPTS)))
def test_quick_mode_prints_the_figures_as_json(script: str, tmp_path: Path) -> None:
    quick_run_prints_its_figures(script, tmp_path)


