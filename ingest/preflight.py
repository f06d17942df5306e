"""Refuse to start on a store path that cannot keep a store, or with no broker to reach: checked once,
before Spark starts.

The job is exactly once only if the store survives the driver: a store on memory (tmpfs, ramfs)
or on a container's throwaway writable layer (overlay, aufs) is lost with the machine or the
container, and the next run would start from Kafka offsets the store no longer has. A filesystem
that cannot lock files (some NFS setups) would let two drivers write one store.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store import StoreError, describe_failure

ENV_ALLOW_EPHEMERAL = "COMMITLOG_ALLOW_EPHEMERAL_STORE"

# Filesystems whose content is gone when the machine or the container goes: memory-backed, or a
# container's copy-on-write layer (a path there is not on a volume).
EPHEMERAL_FS_TYPES = frozenset({"tmpfs", "ramfs", "devtmpfs", "overlay", "overlayfs", "aufs"})

PROBE_NAME = ".commitlog-preflight"


class StorePathError(StoreError):
    """The store path cannot hold a durable, single-writer store."""

    def __init__(self, path: str, reason: str) -> None:
        self.path, self.reason = path, reason
        super().__init__(f"store path {path}: {reason}")


class PreflightError(Exception):
    """Something the job needs before Spark starts is not there."""


class BrokerUnreachableError(PreflightError):
    def __init__(self, servers: str, timeout_s: float, causes: list[str]) -> None:
        super().__init__(f"no Kafka broker answers at --bootstrap-servers {servers} within {timeout_s:g} s "
                         f"({'; '.join(causes)}); check the address and that the broker is up")


def check_brokers(servers: str, timeout_s: float = 10.0) -> None:
    """Raise BrokerUnreachableError unless one of the bootstrap servers accepts a TCP connection
    within ``timeout_s`` (what the Kafka client would do first, without Spark's minutes of retries)."""
    causes = []
    deadline = time.monotonic() + timeout_s
    for server in [s.strip() for s in servers.split(",") if s.strip()]:
        host, _, port = server.rpartition(":")
        host = host.strip("[]") or "localhost"
        if not port.isdigit():
            raise BrokerUnreachableError(servers, timeout_s, [f"{server!r} is not host:port"])
        try:
            with socket.create_connection((host, int(port)), timeout=max(0.1, deadline - time.monotonic())):
                return
        except OSError as exc:
            causes.append(f"{server}: {exc.strerror or exc}")
    raise BrokerUnreachableError(servers, timeout_s, causes or ["no address given"])


@dataclass(frozen=True)
class Mount:
    mount_point: str
    fs_type: str
    source: str


def _unescape(field: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040 ...).
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def read_mounts(mounts_file: str = "/proc/mounts") -> list[Mount]:
    """The mount table, or [] where there is none (not Linux)."""
    try:
        with open(mounts_file, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 3:
            mounts.append(Mount(_unescape(parts[1]), parts[2], _unescape(parts[0])))
    return mounts


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount that holds ``path`` (the longest mount point above it; the last one mounted wins)."""
    best: Mount | None = None
    for m in mounts:
        mp = m.mount_point.rstrip("/") or "/"
        if path == mp or path.startswith(mp if mp.endswith("/") else mp + "/"):
            if best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/"):
                best = m
    return best


def _check_locking(root: Path) -> None:
    # The store's own lock file lives in the store; probe a separate file so this check never
    # collides with a lock the store (or another driver) holds.
    probe = root / PROBE_NAME
    try:
        fd = os.open(probe, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StorePathError(str(root), f"cannot create a file there ({describe_failure(exc)}); "
                                        "the job needs write access") from exc
    try:
        for name, lock, unlock in (("flock", lambda: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
                                    lambda: fcntl.flock(fd, fcntl.LOCK_UN)),
                                   ("fcntl", lambda: fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB),
                                    lambda: fcntl.lockf(fd, fcntl.LOCK_UN))):
            try:
                lock()
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EACCES):
                    raise StorePathError(
                        str(root), f"another process holds a {name} lock on {probe}: is another "
                                   "job starting on this store? one driver per store") from exc
                raise StorePathError(
                    str(root), f"the filesystem refuses {name} locks ({exc.strerror}); the store's "
                               "single-writer lock would not hold there: use a local disk or a "
                               "volume that supports POSIX locks") from exc
            unlock()
    finally:
        os.close(fd)
        try:
            probe.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:      # the store's own files could not be removed either (retention, segment rolls)
            raise StorePathError(str(root), f"cannot remove a file there ({describe_failure(exc)}); the job "
                                            "needs write access") from exc


def check_store_path(path: str | os.PathLike[str], *, mounts_file: str = "/proc/mounts") -> None:
    """Raise StorePathError unless ``path`` can hold the store: creatable and writable, on a
    filesystem that outlives the process and its container (not tmpfs/ramfs/overlay, unless
    $COMMITLOG_ALLOW_EPHEMERAL_STORE=1), and able to take the file locks the store relies on."""
    raw = os.fspath(path)
    if not raw:
        raise StorePathError("''", "empty path; pass --store DIR")
    root = Path(raw).expanduser()
    if root.exists() and not root.is_dir():
        raise StorePathError(raw, "exists and is not a directory")
    # The filesystem is judged before anything is created, so a refused path leaves nothing behind
    # (realpath resolves the part that exists; the rest can only be on the same mount).
    mount = mount_of(os.path.realpath(root), read_mounts(mounts_file))
    if mount is not None and mount.fs_type in EPHEMERAL_FS_TYPES \
            and os.environ.get(ENV_ALLOW_EPHEMERAL) != "1":
        where = ("a container's writable layer (not a volume)" if mount.fs_type in
                 {"overlay", "overlayfs", "aufs"} else "memory")
        raise StorePathError(
            raw, f"is on {mount.fs_type} at {mount.mount_point}, i.e. {where}: the store and the "
                 "exactly-once state would be lost with it. Mount a persistent volume there "
                 f"(docker volume, PersistentVolumeClaim, local disk), or set "
                 f"{ENV_ALLOW_EPHEMERAL}=1 for a throwaway run")
    _make_dir(root, lambda reason: StorePathError(raw, reason))
    if not os.access(root, os.W_OK | os.X_OK):
        raise StorePathError(raw, f"not writable by uid {os.getuid()}")
    _check_locking(root)


def _make_dir(path: Path, refused: Callable[[str], Exception], mode: int = 0o777) -> None:
    """``path`` and its parents made directories where they are not yet (``path`` itself with
    ``mode``, less the umask); ``refused(reason)`` if not."""
    try:
        path.mkdir(mode=mode, parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise refused("exists and is not a directory") from exc
    except OSError as exc:
        raise refused(f"cannot be created ({describe_failure(exc)})") from exc


class CheckpointPathError(PreflightError):
    """--checkpoint names a place Spark cannot keep its checkpoint."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"--checkpoint {path}: {reason}")


def check_checkpoint_path(checkpoint: str | None) -> None:
    """Raise CheckpointPathError unless a local ``--checkpoint`` is, or can become, a directory the
    job can write files in (Spark would find out only after its start, in a Java stack trace). A
    location of another file system (hdfs:, s3a:) is left to Spark."""
    from sink.spark_checkpoint import local_checkpoint_path

    path = local_checkpoint_path(checkpoint)
    if path is None:
        return
    shown = str(checkpoint)
    path = path.expanduser()
    if path.exists() and not path.is_dir():
        raise CheckpointPathError(shown, "exists and is not a directory; give a directory (created if missing)")
    # 0700 as sink.spark_checkpoint.check_checkpoint_dir makes it: no one else may write Spark's offsets
    _make_dir(path, lambda reason: CheckpointPathError(shown, reason), 0o700)
    probe = path / PROBE_NAME
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"probe")
        finally:
            os.close(fd)
        probe.unlink()
    except OSError as exc:
        raise CheckpointPathError(shown, f"cannot be written ({describe_failure(exc)}); Spark keeps its offsets and "
                                         f"commits there") from exc


def missing_topics(client_params: dict, names: list[str]) -> list[str]:
    """The subscribed topics the brokers do not have (yet). Asking does not create them: the
    metadata request lists every topic rather than naming ours."""
    from ingest.kafka.admin import OffsetReader

    with OffsetReader(client_params, timeout_ms=10_000) as reader:
        have = reader.meta.topics()
    return [n for n in names if n not in have]


class KafkaRefusedError(PreflightError):
    """The brokers refuse the job's client (TLS, SASL, ACLs), or its settings cannot work: one line
    naming the cause (ingest.kafka.access)."""


def check_topics_reachable(cfg: Any, warn_missing: bool = True) -> None:
    """The client settings can work, the brokers answer (BrokerUnreachableError else), let the job's
    client in and let it Describe and Read its topics (KafkaRefusedError else); and, with
    ``warn_missing`` (a stream's, which waits for them), see warn_missing_topics."""
    from ingest.kafka.access import KafkaAccessError, check_client_settings

    try:
        check_client_settings(cfg.kafka_option)
    except KafkaAccessError as exc:
        raise KafkaRefusedError(str(exc)) from None
    timeout_s = _connect_timeout_s(cfg.kafka_option)
    check_brokers(cfg.bootstrap_servers, timeout_s)
    check_kafka_access(cfg, timeout_s)
    if warn_missing:
        warn_missing_topics(cfg)


def check_kafka_access(cfg: Any, timeout_s: float) -> None:
    """One connection and one Metadata request with the settings the source's client uses (Spark's
    connector's translated to kafka-python's): a refusal is KafkaRefusedError. Settings kafka-python
    cannot use (a JKS store) are left to Spark's connector to judge; for our source they are the
    refusal."""
    from ingest.reader_options import kafka_reader_options
    from ingest.kafka.access import KafkaAccessError, check_access
    from ingest.kafka.options import KafkaOptionError, kafka_client_params

    topics, pattern = _subscription(cfg)
    try:
        params = kafka_client_params(kafka_reader_options(cfg, "earliest"))
    except KafkaOptionError as exc:
        if cfg.source == "kafka-python":
            raise KafkaRefusedError(str(exc)) from None
        logging.getLogger("commitlog.run").info("the brokers' access is left to Spark's connector: %s", exc)
        return
    try:
        check_access(params, topics=topics, pattern=pattern, timeout_ms=int(timeout_s * 1000))
    except KafkaAccessError as exc:
        raise KafkaRefusedError(str(exc)) from None


def _subscription(cfg: Any) -> tuple[list[str] | None, str | None]:
    """The topics (or the pattern) ``cfg`` reads; none for a subscription of every topic (``*``)."""
    import json

    if cfg.subscribe_pattern:
        return None, cfg.subscribe_pattern
    if cfg.assign:
        try:
            return sorted(json.loads(cfg.assign)), None
        except (ValueError, TypeError):
            return None, None      # the source names what is wrong with the JSON
    names = [t.strip() for t in (cfg.subscribe or "").split(",") if t.strip() and t.strip() != "*"]
    return names or None, None


def warn_missing_topics(cfg: Any) -> None:
    """A subscribed topic the brokers lack is one warning line (the job reads it once it exists)."""
    from ingest.reader_options import kafka_reader_options
    from ingest.kafka.options import KafkaSourceError, kafka_client_params

    if not cfg.subscribe:
        return
    names = [t.strip() for t in cfg.subscribe.split(",") if t.strip()]
    try:
        missing = missing_topics(kafka_client_params(kafka_reader_options(cfg, "earliest")), names)
    except (KafkaSourceError, OSError) as exc:
        logging.getLogger("commitlog.run").warning("could not list the brokers' topics: %s", exc)
        return
    if missing:
        logging.getLogger("commitlog.run").warning(
            "topic%s %s not on the brokers at %s (yet): the job reads %s once %s", "s" if len(missing) > 1 else "",
            ", ".join(missing), cfg.bootstrap_servers, "them" if len(missing) > 1 else "it",
            "they exist" if len(missing) > 1 else "it exists")


def _connect_timeout_s(kafka_options: dict[str, str]) -> float:
    for key in ("socket.connection.setup.timeout.ms", "kafka.socket.connection.setup.timeout.ms"):
        if key in kafka_options:
            return int(kafka_options[key]) / 1000
    return 10.0     # kafka-python's socket.connection.setup.timeout.ms default
