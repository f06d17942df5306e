"""The one way the tests wait for something that happens in the background: poll a predicate until it
holds or a deadline passes, then fail naming what did not happen (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """What was waited for did not happen in time; the message names it and what was seen last."""


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, *, interval_s: float = 0.05,
               retry_on: tuple[type[BaseException], ...] = (),
               error: Callable[[str], BaseException] = WaitTimeout) -> T:
    """``predicate()``'s first truthy value, polled every ``interval_s``; an exception of ``retry_on``
    counts as not yet (a server still starting). After ``timeout_s``, raise ``error`` with a message
    naming ``what`` and the last value or exception seen."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except retry_on as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise error(f"timed out after {timeout_s:g} s waiting for {what} (last: {last!r})")
        time.sleep(interval_s)
