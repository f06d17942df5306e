"""The pipeline benchmark's picture: throughput and batch latency against maxOffsetsPerTrigger, one
line per sink (bench/pipeline.py --plot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


SERIES = [("commitlog.sync", "commitlog run, SYNC", "tab:blue"), ("commitlog.async", "commitlog run, ASYNC", "tab:cyan"),
          ("parquet", "parquet sink (peer)", "tab:orange"), ("noop", "noop sink (source ceiling)", "tab:gray")]


def plot(report: dict[str, Any], png: Path) -> None:
    """Throughput and batch latency against maxOffsetsPerTrigger, one line per sink."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = report["figures"]
    sizes = sorted({int(k.split(".")[0].removeprefix("batch")) for k in figs if k.startswith("batch")})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), dpi=80)
    for key, label, color in SERIES:
        def med(metric: str) -> list[float]:
            return [figs.get(f"batch{b}.{key}.{metric}", {}).get("median", float("nan")) for b in sizes]
        ax1.plot(sizes, [v / 1e3 for v in med("msgs_per_s")], "o-", color=color, label=label)
        if key.startswith("commitlog"):
            ax2.plot(sizes, [v / 1e3 for v in med("batch_p50_ms")], "o-", color=color, label=f"{label} p50")
            ax2.plot(sizes, [v / 1e3 for v in med("batch_p99_ms")], "s--", color=color, label=f"{label} p99")
        else:
            ax2.plot(sizes, [v / 1e3 for v in med("batch_p50_ms")], "o:", color=color, label=f"{label} p50")
    ax1.set(xscale="log", xlabel="maxOffsetsPerTrigger (records per batch)", ylabel="sustained k msg/s",
            title="throughput")
    ax2.set(xscale="log", xlabel="maxOffsetsPerTrigger (records per batch)", ylabel="batch latency, s",
            title="batch latency")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=6)
    fig.suptitle(f"Kafka -> CommitLog, {report['machine']['nproc']} cores, {report['date'][:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)
