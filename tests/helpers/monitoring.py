"""What the monitoring tests share: the shipped dashboard's queries."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "commitlog-ingest.json"


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the Grafana dashboard's panels."""
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
