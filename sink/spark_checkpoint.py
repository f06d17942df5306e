"""The store is the truth; Spark's checkpoint is brought back to it before a query starts.

The sink writes a batch while Spark runs the next one (sink.foreach_batch), so Spark may record batch
N as done (``<checkpoint>/commits/N``) before the store has committed it. A job stopped in that window
would, on restart, have Spark go on from batch N + 1 and the store miss batch N. ``rewind_to_store``
closes the window: it removes Spark's records of every batch the store has not committed, so Spark
runs the first of them again, over the same Kafka range (``offsets/N`` is kept), and the sink writes
it. Records the store already holds are dropped by Kafka offset (ingest.encode.prepare.drop_held), so the
re-run can never write one twice.

The layout read here is Spark's streaming checkpoint on a local file system: ``metadata`` (the query
id), ``offsets/<batch>`` and ``commits/<batch>``, each with a Hadoop ``.<batch>.crc`` beside it when
Hadoop's checksummed local file system wrote it (the job's own session writes without: ingest.job).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from sink.handover.trust import UntrustedPathError, mkdir_private, open_dir, user_name
from sink.state import SinkState

# What Spark keeps in a checkpoint: ``offsets`` decides which Kafka range a batch reads after a restart
SPARK_ENTRIES = ("metadata", "offsets", "commits", "sources", "state")

log = logging.getLogger(__name__)


class CheckpointRewindError(RuntimeError):
    """Spark's checkpoint is ahead of the store and cannot be brought back to it."""


def local_checkpoint_path(checkpoint: str | None) -> Path | None:
    """The local directory of a checkpoint location (a path or a ``file:`` URI), else None."""
    if not checkpoint:
        return None
    parsed = urlparse(checkpoint)
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else checkpoint)
    return None


def check_checkpoint_dir(checkpoint: str | None) -> None:
    """Refuse (UntrustedPathError) a local checkpoint another user could change: Spark re-reads the
    Kafka range of ``offsets/<batch>`` after a restart, so whoever writes there chooses what a batch
    reads (records skipped). The directory must be writable by us and by no one else but our group,
    and none of Spark's entries in it a symbolic link or writable by everyone. One that does not
    exist yet is made here, 0700, so that no one can make it first; Spark uses it as it finds it."""
    path = local_checkpoint_path(checkpoint)
    if path is None:
        return
    what = "--checkpoint"
    real = os.path.realpath(path)
    if not os.path.lexists(real):
        mkdir_private(real, what)
    fd = open_dir(real, what)
    try:
        st = os.fstat(fd)
        if st.st_mode & stat.S_IWOTH:
            raise UntrustedPathError(f"{what} {checkpoint} is writable by every user (mode {stat.S_IMODE(st.st_mode):04o}): "
                                     f"whoever writes Spark's offsets there chooses what the job reads; chmod o-w it "
                                     f"or name a directory of yours")
        if not os.access(real, os.W_OK):
            raise UntrustedPathError(f"{what} {checkpoint} belongs to {user_name(st.st_uid)} and is not writable by "
                                     f"{user_name(os.geteuid())} who runs the job: name a directory of yours")
        for name in SPARK_ENTRIES:
            try:
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(entry.st_mode):
                raise UntrustedPathError(f"{what} {checkpoint}: Spark's {name} in it is a symbolic link, which a "
                                         f"checkpoint never holds: refused")
            if entry.st_mode & stat.S_IWOTH:
                raise UntrustedPathError(f"{what} {checkpoint}: Spark's {name} in it is writable by every user (mode "
                                         f"{stat.S_IMODE(entry.st_mode):04o}): chmod o-w it")
    finally:
        os.close(fd)


def checkpoint_query_id(checkpoint: str | None) -> str | None:
    """The streaming query id Spark keeps in ``<checkpoint>/metadata``: it names one checkpoint."""
    path = local_checkpoint_path(checkpoint)
    if path is None:
        return None
    try:
        return str(json.loads((path / "metadata").read_text().splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def _batch_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


@dataclass(frozen=True)
class Rewind:
    """What ``rewind_to_store`` removed: Spark runs ``rerun`` again."""

    rerun: int
    commits: list[int]
    offsets: list[int]


def rewind_to_store(checkpoint: str | None, state: SinkState) -> Rewind | None:
    """Remove Spark's records of the batches the store has not committed: those after the store's last
    one (``state.batch_id``) when the store's last commit came from this checkpoint's query, else
    all of them (the store committed nothing of this query: its first batch was being written when
    the job stopped). Returns what was removed, or None when Spark is not ahead of the store.

    Offsets go first, from the highest: a stop half-way leaves the commits ahead, which the next
    call removes; Spark itself never starts in between (this runs before the query)."""
    path = local_checkpoint_path(checkpoint)
    query_id = checkpoint_query_id(checkpoint)
    last = state.batch_id if state.query_id == query_id else -1
    if path is None or set_aside_if_damaged(path, last) is not None or query_id is None:
        return None
    commits = [b for b in _batch_ids(path / "commits") if b > last]
    if not commits:
        return None
    rerun = last + 1
    if not (path / "offsets" / str(rerun)).is_file():
        raise CheckpointRewindError(
            f"Spark's checkpoint {checkpoint} records batches up to {commits[-1]} but the store's last "
            f"committed batch of its query is {last}, and the checkpoint no longer holds batch {rerun}'s "
            f"offsets to run it again. Start with a new, empty --checkpoint: the job then continues "
            f"from the Kafka offsets the store recorded")
    offsets = [b for b in _batch_ids(path / "offsets") if b > rerun]
    for kind, batches in (("offsets", offsets[::-1]), ("commits", commits[::-1])):
        for batch in batches:
            for name in (str(batch), f".{batch}.crc"):
                (path / kind / name).unlink(missing_ok=True)
    log.warning("Spark's checkpoint recorded batch(es) %s that the store had not committed (the job "
                "stopped while writing): rewound, Spark runs batch %d again", commits, rerun)
    return Rewind(rerun, commits, offsets)


def damage(path: Path, committed: int = -1) -> str | None:
    """What makes Spark's checkpoint at ``path`` unreadable to Spark, as a power cut leaves it (Spark
    never syncs its entries: any written since the disk last wrote back may be empty, cut short,
    absent or under its temporary name), or None. Spark stops on such a checkpoint ("Incomplete log
    file", "Concurrent update to the log") and no run could resume it. ``committed``: the store's last
    batch of this checkpoint's query (-1: none); commits past it are the rewind's to remove."""
    meta = path / "metadata"
    if meta.exists() and checkpoint_query_id(str(path)) is None:
        return f"{meta} has no query id (empty or cut short)"
    # as Spark reads them: a version line, then (offsets) the batch's metadata and one line per source
    for kind, least in (("offsets", 2), ("commits", 1)):
        ids = _batch_ids(path / kind)
        # (offsets missing below the batch to run again are the rewind's refusal, CheckpointRewindError)
        if kind == "commits" and ids and ids != list(range(ids[0], ids[-1] + 1)):
            missing = sorted(set(range(ids[0], ids[-1] + 1)) - set(ids))
            return f"{path / kind} lacks batch {missing[0]} between {ids[0]} and {ids[-1]}"
        width = None
        for batch in ids:
            problem = _entry_problem(path / kind / str(batch), width or least)
            if problem:
                return f"{path / kind / str(batch)} {problem}"
            if kind == "offsets":       # every batch has a line per source: one cut at a line has fewer
                width = width or len(_lines((path / kind / str(batch)).read_text()))
    offsets, commits = _batch_ids(path / "offsets"), _batch_ids(path / "commits")
    if commits and min(commits[-1], committed) > (offsets[-1] if offsets else -1):
        return (f"{path / 'commits'} records batch {min(commits[-1], committed)} but {path / 'offsets'} has no "
                "offsets for it")
    return None


def _entry_problem(entry: Path, lines: int) -> str | None:
    try:
        text = entry.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read ({exc})"
    parts = _lines(text)
    if not text:
        return "is empty"
    if not re.fullmatch(r"v\d+", parts[0].strip()) or len(parts) < lines:
        return "is cut short"
    try:
        for part in parts[1:]:
            if part != "-":     # a source with no offset yet
                json.loads(part)
    except ValueError:
        return "is cut short (its JSON ends early)"
    return None


def _lines(text: str) -> list[str]:
    """As Scala's getLines: no empty last line for a final newline."""
    return text.rstrip("\n").split("\n") if text else []


def set_aside_if_damaged(path: Path, committed: int = -1) -> Path | None:
    """Move Spark's entries of a damaged checkpoint (``damage``) into ``<path>/damaged-<ms>/``, so
    that Spark starts a new query there; the job then continues from the Kafka offsets the store
    recorded (ingest.job.starting_offsets), as after a lost checkpoint. Returns where they went."""
    problem = damage(path, committed)
    if problem is None:
        return None
    aside = path / f"damaged-{int(time.time() * 1000)}"
    mkdir_private(str(aside), "--checkpoint")
    for name in SPARK_ENTRIES:
        if (path / name).exists():
            os.rename(path / name, aside / name)
    log.warning("Spark's checkpoint %s cannot be resumed: %s (Spark never syncs its entries: a power cut "
                "leaves them so); its entries are moved to %s and a new query continues from the Kafka "
                "offsets the store recorded", path, problem, aside)
    return aside
