"""The latency benchmark's picture: record latency (p50 and p99) against the produce rate, ours beside
the sources' floors, with Apache Kafka's and RocketMQ's own as lines (bench/latency.py --png)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SERIES = [("commitlog.sync", "commitlog run, SYNC", "tab:blue"), ("commitlog.async", "commitlog run, ASYNC", "tab:cyan"),
          ("spark_kafka.source", "Spark's connector, rows only (peer)", "tab:orange"),
          ("ours.source", "our source, rows only", "tab:gray")]
FLOORS = [("kafka_e2e.p99_ms", "Kafka EndToEndLatency p99", "tab:green"),
          ("rocketmq_send.sync_flush.p99_ms", "RocketMQ 5 SYNC_FLUSH send p99", "tab:red")]


def plot(report: dict[str, Any], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = report["figures"]
    rates = sorted({int(k.split(".rate")[1].split(".")[0]) for k in figs if ".rate" in k})
    fig, ax = plt.subplots(figsize=(7, 4), dpi=80)
    for key, label, color in SERIES:
        def med(p: str) -> list[float]:
            return [figs.get(f"{key}.rate{r}.{p}_ms", {}).get("median", float("nan")) for r in rates]
        if all(v != v for v in med("p50")):
            continue
        ax.plot(rates, med("p50"), "o-", color=color, label=f"{label} p50")
        ax.plot(rates, med("p99"), "s--", color=color, label=f"{label} p99")
    for key, label, color in FLOORS:
        if key in figs:
            ax.axhline(figs[key]["median"], color=color, linestyle=":", label=label)
    ax.set(xscale="log", yscale="log", xlabel="produce rate, msg/s (100-byte records)",
           ylabel="producer timestamp to commit, ms", title="end-to-end latency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png)
