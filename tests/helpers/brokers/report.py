"""Which Kafka broker each test module got (the containerized one, Apache Kafka from the jars, Tansu
or an external one): each module notes a line in a file of the run, and the run's summary lists
them. The file's path is in $COMMITLOG_BROKER_REPORT, set by the controlling process before the
pytest-xdist workers start (they inherit it)."""

from __future__ import annotations

import os
from pathlib import Path

BROKER_REPORT = "COMMITLOG_BROKER_REPORT"


def start_report(directory: Path) -> None:
    """A fresh report file for this run, unless the caller named one."""
    if BROKER_REPORT not in os.environ:
        path = directory / f"run-{os.getpid()}.txt"
        path.write_text("")
        os.environ[BROKER_REPORT] = str(path)


def note_broker(module: str, broker: object) -> None:
    """One line: the module and the broker it got (ingest.devtools.broker.Broker)."""
    path = os.environ.get(BROKER_REPORT)
    if path:
        with open(path, "a") as f:
            f.write(f"{module}: {broker.kind} at {broker.bootstrap_servers}\n")  # type: ignore[attr-defined]


def report_lines() -> list[str]:
    path = os.environ.get(BROKER_REPORT)
    if not path or not Path(path).exists():
        return []
    return sorted(set(Path(path).read_text().splitlines()))
