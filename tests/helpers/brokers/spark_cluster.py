"""A real Spark standalone cluster on 127.0.0.1 for the deploy tests: one Master and one Worker,
started from the pyspark package's own launcher (spark-class), stopped by pid.

Executors are separate JVMs under the Worker, each with its own Python workers, so a job sees the
project on an executor only if the launcher shipped it there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ingest.devtools.broker.base import free_port
from tests.helpers.waiting import wait_until


class SparkClusterError(RuntimeError):
    """The standalone cluster did not come up; the message carries the daemon's log tail."""


@dataclass
class SparkCluster:
    master_url: str
    master_web_url: str
    spark_home: Path
    work_dir: Path
    master_pid: int
    worker_pid: int
    master_log: Path
    worker_log: Path

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.master_web_url}/json/", timeout=5) as r:
            return json.load(r)

    def logs(self, tail: int = 3000) -> str:
        return daemon_logs((self.master_log, self.worker_log), tail)


def daemon_logs(paths: tuple[Path, ...], tail: int = 3000) -> str:
    return "\n".join(f"--- {p.name} ---\n{p.read_text(errors='replace')[-tail:]}" for p in paths if p.exists())


def spark_home() -> Path:
    """The pyspark package directory: pip's pyspark is a full Spark distribution (bin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def daemon_env(home: Path, base: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemons' environment. Executors inherit it, so it must not lead to the project: no
    PYTHONPATH, and the daemons run in a scratch directory, not the checkout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env.update({
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(base / "local"),
        "SPARK_WORKER_DIR": str(base / "work"),
        "SPARK_LOG_DIR": str(base / "logs"),
        "SPARK_NO_DAEMONIZE": "1",
    })
    env.update(extra or {})
    return env


def _stop(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """SIGTERM the daemon, then SIGKILL; then its whole process group (the daemon's own session,
    started by us), which also holds the executors a Worker launched."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def standalone_cluster(base: Path, cores: int = 1, memory: str = "1g",
                       env: Mapping[str, str] | None = None,
                       timeout_s: float = 90.0, workers: int = 1) -> Iterator[SparkCluster]:
    """Start a Master and ``workers`` Workers on 127.0.0.1 under ``base``; stop them by pid on exit."""
    home = spark_home()
    base.mkdir(parents=True, exist_ok=True)
    for d in ("local", "work", "logs"):
        (base / d).mkdir(exist_ok=True)
    denv = daemon_env(home, base, env)
    port, web_port = free_port(), free_port()
    spark_class = str(home / "bin" / "spark-class")
    master_log, worker_log = base / "logs" / "master.log", base / "logs" / "worker.log"
    procs: list[subprocess.Popen] = []
    files = []
    try:
        mlog = open(master_log, "wb")
        files.append(mlog)
        master = subprocess.Popen(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(web_port)],
            cwd=base, env=denv, stdout=mlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        procs.append(master)
        master_url = f"spark://127.0.0.1:{port}"
        web = f"http://127.0.0.1:{web_port}"

        def logs() -> str:
            return daemon_logs((master_log, worker_log))

        def master_alive() -> bool:
            if master.poll() is not None:
                raise SparkClusterError(f"Master exited with {master.returncode}\n{logs()}")
            with urllib.request.urlopen(f"{web}/json/", timeout=3) as r:
                return json.load(r).get("status") == "ALIVE"

        wait_until(master_alive, timeout_s, "the Master to answer", interval_s=0.5,
                   retry_on=(OSError, ValueError), error=lambda m: SparkClusterError(f"{m}\n{logs()}"))

        for w in range(workers):
            wlog = open(worker_log if w == 0 else base / "logs" / f"worker{w}.log", "wb")
            files.append(wlog)
            worker = subprocess.Popen(
                [spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                 "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                 "--webui-port", str(free_port()), "--work-dir", str(base / "work")],
                cwd=base, env=denv, stdout=wlog, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
            procs.append(worker)

        def worker_registered() -> bool:
            for proc in procs[1:]:
                if proc.poll() is not None:
                    raise SparkClusterError(f"a Worker exited with {proc.returncode}\n{logs()}")
            with urllib.request.urlopen(f"{web}/json/", timeout=3) as r:
                alive = [w for w in json.load(r).get("workers", []) if w.get("state") == "ALIVE"]
            return len(alive) >= workers

        wait_until(worker_registered, timeout_s, "the Workers to register", interval_s=0.5,
                   retry_on=(OSError, ValueError), error=lambda m: SparkClusterError(f"{m}\n{logs()}"))
        worker = procs[1]
        yield SparkCluster(master_url, web, home, base / "work", master.pid, worker.pid,
                           master_log, worker_log)
    finally:
        for proc in reversed(procs):  # the Worker first: it takes its executors down with it
            _stop(proc)
        for f in files:
            f.close()
