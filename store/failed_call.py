"""Which system call an OSError came from, and on which file: read off the traceback.

An OSError from ``os.fsync(fd)`` or ``mm.flush()`` carries an errno but neither the call's name nor a
file (only path-taking calls set ``filename``). The store's messages promise both, so the innermost
frame that made a recognizable call is read: its source line names the call, and its locals the file
(a path, or a descriptor still open, read back through /proc/self/fd).
"""

from __future__ import annotations

import errno
import linecache
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

# the Python spelling of a call -> the system call it makes, most particular first (``mm.flush`` is
# an msync, a buffered file's ``flush`` a write)
_CALLS: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), name) for p, name in (
    (r"\bos\.fdatasync\(", "fdatasync"),
    (r"\bos\.fsync\(", "fsync"),
    (r"\bmm\.flush\(|_mm\.flush\(", "msync"),
    (r"\bposix_fallocate\(", "fallocate"),
    (r"\bftruncate\(|\.truncate\(", "ftruncate"),
    (r"\bos\.(replace|rename)\(|\.(replace|rename)\(", "rename"),
    (r"\bos\.(unlink|remove|rmdir)\(|\.unlink\(|\brmtree\(", "unlink"),
    (r"\bos\.(mkdir|makedirs)\(|\.mkdir\(", "mkdir"),
    (r"\bos\.pwrite\(", "pwrite"),
    (r"\bos\.write\(|\.write\(|\.write_bytes\(|\.write_text\(|\.flush\(", "write"),
    (r"\bos\.open\(|\bopen\(|\bmmap\.mmap\(|\.read_bytes\(|\.read_text\(|\bos\.(listdir|scandir)\(", "open"),
    (r"\bos\.(pread|read)\(|\.read\(", "read"),
))


@dataclass(frozen=True)
class FailedCall:
    """The system call that failed (``fsync``, ``msync``, ...; "" when unrecognized), the Python
    function that made it (the innermost one when the call is not recognized), and the file it was
    on (None when it cannot be told)."""

    call: str
    function: str
    file: str | None

    def describe(self) -> str:
        """``fsync on /store/commitlog/000.. in sync_range()``: the parts that are known."""
        parts = [self.call or "a system call"]
        if self.file:
            parts.append(f"on {self.file}")
        if self.function:
            parts.append(f"in {self.function}()")
        return " ".join(parts)


def failed_call(cause: OSError) -> FailedCall:
    """What ``cause`` says of its call, from its own fields and its traceback."""
    steps = list(_steps(cause.__traceback__))
    named = [f for f, _ in steps if not f.f_code.co_name.startswith("__")]
    function = named[-1].f_code.co_name if named else ""
    for frame, lineno in reversed(steps):
        line = linecache.getline(frame.f_code.co_filename, lineno).strip()
        for pattern, name in _CALLS:
            found = pattern.search(line)
            if found:
                file = cause.filename or _file_of(frame, line, found)
                return FailedCall(name, frame.f_code.co_name, str(file) if file is not None else None)
    return FailedCall("", function, str(cause.filename) if cause.filename else None)


def _steps(tb: TracebackType | None) -> Iterator[tuple[FrameType, int]]:
    # tb_lineno, not the frame's f_lineno: a finally block may have run past the raising line
    while tb is not None:
        yield tb.tb_frame, tb.tb_lineno
        tb = tb.tb_next


_CALLEE = re.compile(r"([A-Za-z_][\w.]*)\($")
_ARG = re.compile(r"\s*([A-Za-z_][\w.]*)\s*[,)]")


def _file_of(frame: FrameType, line: str, call: re.Match[str]) -> str | None:
    """The file of the call on ``line``: for ``os.f(x, ...)`` its first argument (a path, or a
    descriptor the frame still holds); for ``obj.f(...)`` the object (a file's name, a segment's or
    a queue's path), or for a mapping ``owner._mm.flush(...)`` its owner."""
    callee = _CALLEE.search(line, 0, call.end())
    if callee is None:
        return None
    obj, _, _ = callee.group(1).rpartition(".")
    if obj in ("os", ""):
        arg = _ARG.match(line, call.end())
        obj = arg.group(1) if arg else ""
    # the expression, then its owner: self._fd -> self (when the descriptor is gone), self._mm -> self
    candidates = [obj, obj.rpartition(".")[0]] if "." in obj else [obj]
    for expr in candidates:
        file = _file_named_by(_resolve(frame, expr))
        if file:
            return file
    return None


def _resolve(frame: FrameType, expr: str) -> object:
    head, *rest = expr.split(".")
    value = frame.f_locals.get(head)
    for attr in rest:
        value = getattr(value, attr, None)
    return value


def _file_named_by(value: object) -> str | None:
    if isinstance(value, Path) or (isinstance(value, str) and os.sep in value):
        return str(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        try:
            return os.readlink(f"/proc/self/fd/{value}")
        except OSError:
            return None
    for attr in ("path", "_path", "name"):
        v = getattr(value, attr, None) if value is not None else None
        if isinstance(v, Path) or (isinstance(v, str) and os.sep in v):
            return str(v)
    return None


def describe_failure(e: BaseException) -> str:
    """An error for a message: Python's own OSError as its call, file and reason (``fsync on X in
    f(): Input/output error``); one of ours (whose message already says what it needs) or anything
    else as itself."""
    if isinstance(e, OSError) and e.errno is not None and type(e).__module__ == "builtins":
        return f"{failed_call(e).describe()}: {e.strerror}"
    return str(e)


def remedy(errno_: int | None) -> str:
    """What a user does about a failed call, by its errno."""
    if errno_ in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "free disk space (or raise the quota or file size limit) and run again"
    if errno_ == errno.EROFS:
        return "the file system is read-only: make it writable and run again"
    return "check the disk (the kernel log names the device) and run again"

