"""A server process of ours (a broker): started in a session of its own, so that a Ctrl-C or a
group signal reaches the caller, not the server, logged to a file, stopped with SIGTERM (then
SIGKILL after a grace period)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class ServerProcess:
    def __init__(self, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.argv = list(argv)
        self.log_path = log_path
        self.env = None if env is None else {**os.environ, **env}
        self.cwd = cwd
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = None

    def start(self) -> int:
        # the log's directory may be shared: never append through a link someone left at its name
        self._log = os.fdopen(os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                                      | os.O_CLOEXEC, 0o600), "ab")
        self._proc = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=self.env, cwd=self.cwd,
                                      start_new_session=True)
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def wait(self, timeout_s: float) -> int | None:
        """Wait for a process that ends by itself (a tool); its exit code, None if it did not end."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.stop()
            return None
        self._close_log()
        return code

    def stop(self, grace_s: float = 30.0) -> int | None:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL; the exit code (None if never started)."""
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._close_log()
        return proc.returncode

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""
