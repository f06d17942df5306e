"""A progress bar on stderr for long dumps and verifies, drawn only when stderr is a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total_bytes: int, label: str, stream: TextIO | None = None,
                 enabled: bool | None = None, min_interval_s: float = 0.1) -> None:
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = (bool(isatty and isatty())) if enabled is None else enabled
        self.total = max(total_bytes, 1)
        self.label = label
        self.min_interval_s = min_interval_s
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._drawn = False

    def update(self, done_bytes: int, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < self.min_interval_s:
            return
        self._last_draw = now
        frac = min(done_bytes / self.total, 1.0)
        width = 30
        filled = int(frac * width)
        rate = done_bytes / max(now - self.started, 1e-9) / 1e6
        self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                          f"{frac:6.1%} {done_bytes / 1e6:,.0f}/{self.total / 1e6:,.0f} MB {rate:,.0f} MB/s")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
