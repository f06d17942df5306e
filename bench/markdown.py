"""Render bench JSON reports as the Markdown tables of BENCHMARKS.md:
``python bench/markdown.py REPORT.json [...]``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import fmt  # noqa: E402


def markdown(report: dict[str, Any]) -> str:
    """A JSON report as the Markdown BENCHMARKS.md shows: machine, date, command, figures, ratios."""
    m = report["machine"]
    disk = m.get("disk", {})
    lines = [f"`{report['command']}` ({report['mode']} mode, git {report.get('git') or '?'}, "
             f"{report['date']}, {report['elapsed_s']:.0f} s)",
             "",
             f"Machine: {m['nproc']} cores ({m.get('cpu', '')}), {m['mem_gib']} GiB RAM, "
             f"{disk.get('fstype', '?')} on {disk.get('device', '?')}"
             f"{' (rotational per the kernel)' if disk.get('rotational') else ''}, "
             f"{disk.get('free_gib', '?')} GiB free; load average at start {report.get('loadavg_start')}, "
             f"at end {m.get('loadavg')}.",
             "",
             "| figure | median | min | max | unit |",
             "|---|---:|---:|---:|---|"]
    for name, f in report["figures"].items():
        lines.append(f"| {name} | {fmt(f['median'])} | {fmt(f['min'])} | {fmt(f['max'])} | {f['unit']} |")
    if report["ratios"]:
        lines += ["", "| ratio (of medians) | value |", "|---|---:|"]
        lines += [f"| {name} | {value:.3f} |" for name, value in report["ratios"].items()]
    if report.get("notes"):
        lines += [""] + [f"Note: {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(markdown(json.loads(Path(path).read_text())))
