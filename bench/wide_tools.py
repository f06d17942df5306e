"""`commitlog verify` and `commitlog stat` over the same records in 12 queues and in 6,000: what
the tools pay per queue. 300,000 records of 100 B (30,000 with --quick) written by our store into
12 queues (1 topic) and into 6,000 (500 topics x 12); each command's wall time (startup included),
the median of --runs, and the 6,000-queue time over the 12-queue one. Usage:
    .venv/bin/python bench/wide_tools.py [--quick] [--json] [--runs N]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common  # noqa: E402

BODY = 100
QUEUES_PER_TOPIC = 12


def write(root: Path, topics: int, records: int) -> None:
    from store import Message, MessageStore, StoreConfig

    body = bytes((97 + i % 26) for i in range(BODY))
    queues = topics * QUEUES_PER_TOPIC
    msgs = [Message(f"Wide{(i % queues) // QUEUES_PER_TOPIC}", body, queue_id=i % QUEUES_PER_TOPIC,
                    properties=f"KEYS\x01k{i}\x02") for i in range(records)]
    with MessageStore.open(root, StoreConfig(segment_size=256 << 20)) as store:
        for start in range(0, records, 50_000):
            store.append(msgs[start:start + 50_000])
            store.commit()


def timed(*args: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run([common.python(), "-m", "ingest.cli", *args], capture_output=True, text=True,
                          timeout=1800, env=common.env_for_subprocess())
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"commitlog {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    args = common.parser(__doc__.splitlines()[0]).parse_args()
    rep = common.Report("wide_tools", args)
    records = 30_000 if args.quick else 300_000
    runs = common.runs_of(args, 1)
    rep.params = {"records": records, "body": BODY}
    with common.scratch(args, "wide_tools") as work:
        for topics in (1, 500):
            root = work / f"q{topics * QUEUES_PER_TOPIC}"
            write(root, topics, records)
            for command in ("verify", "stat"):
                rep.add(f"{command}.q{topics * QUEUES_PER_TOPIC}_s",
                        [timed(command, str(root)) for _ in range(runs)], "s")
    for command in ("verify", "stat"):
        rep.ratio(f"{command}.q6000_over_q12", f"{command}.q6000_s", f"{command}.q12_s")
    rep.finish()


if __name__ == "__main__":
    main()
