"""How long does each embedded broker take to start, and answer its first metadata request?

Starts Tansu (in memory) and Apache Kafka (KRaft, one node: storage format, then the server) on free
loopback ports, several times each, and times start -> first metadata answer. Kafka is timed fresh
(format included, what a test or `make demo` pays) and restarted on its formatted data. The peer in
the same run is the other broker: `make demo` keeps the faster one (ingest/devtools/demo.py).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402


def timed_start(kind: str, data_dir: Path) -> tuple[float, float | None]:
    """(seconds to a fresh broker's first metadata answer, seconds to restart it, None for Tansu)."""
    from ingest.devtools.broker import start_embedded

    t0 = time.perf_counter()
    broker = start_embedded(kind, log_dir=data_dir)
    started = time.perf_counter() - t0
    restarted = None
    try:
        if kind == "kafka":
            t0 = time.perf_counter()
            broker.restart()
            restarted = time.perf_counter() - t0
    finally:
        broker.stop()
    return started, restarted


def main(argv: list[str] | None = None) -> int:
    args = common.parser(__doc__.splitlines()[0]).parse_args(argv)
    runs = common.runs_of(args, quick_default=1)
    rep = common.Report("brokers", args)
    rep.params = {"runs": runs}
    out = Path(args.out) / "brokers"
    with common.work_dir(out, args.keep):
        for kind in ("tansu", "kafka"):
            starts, restarts = [], []
            for r in range(runs):
                started, restarted = timed_start(kind, out / f"{kind}-{r}")
                starts.append(started)
                if restarted is not None:
                    restarts.append(restarted)
            rep.add(f"{kind}.start_s", starts, "s")
            if restarts:
                rep.add(f"{kind}.restart_s", restarts, "s")
        rep.ratio("ratio.kafka_vs_tansu_start", "kafka.start_s", "tansu.start_s")
        faster = "tansu" if rep.figures["tansu.start_s"].median <= rep.figures["kafka.start_s"].median else "kafka"
        rep.note(f"faster to start: {faster} (the demo's default broker)")
    rep.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
