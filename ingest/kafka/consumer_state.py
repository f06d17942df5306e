"""kafka-python consumer calls for many partitions at once.

A KafkaConsumer's ``seek()`` and ``position()`` each look at every assigned partition (the
assignment copied into a set; every partition's reset and leader-epoch state), so calling them once
per partition costs P x P for P partitions: seconds at 6,000, on every batch. These do the look
once and set or read each partition's state in the consumer's subscription state. Where that
state is not shaped as expected (another kafka-python), they fall back to the per-partition calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _states(consumer: Any) -> Any:
    return getattr(getattr(consumer, "_subscription", None), "assignment", None)


def seek_all(consumer: Any, offsets: Mapping[Any, int]) -> None:
    """``consumer.seek(part, offset)`` for every entry, with its checks made once."""
    states = _states(consumer)
    subscription = getattr(consumer, "_subscription", None)
    if states is None or not hasattr(subscription, "seek"):
        for part, offset in offsets.items():
            consumer.seek(part, offset)
        return
    for part, offset in offsets.items():
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset {offset!r} of {part}: must be an int >= 0")
        if part not in states:
            raise ValueError(f"{part} is not assigned to the consumer")
        subscription.seek(part, offset)
    consumer._iterator = None       # as seek() does: the next poll starts from the new positions


def positions(consumer: Any, parts: Sequence[Any]) -> dict[Any, int]:
    """The consumer's position on each of ``parts``: one ``position()`` call does the offset checks
    for all (resets, leader-epoch validation), the others read the positions it left."""
    if not parts:
        return {}
    out = {parts[0]: consumer.position(parts[0])}
    states = _states(consumer)
    for part in parts[1:]:
        state = states.get(part) if states is not None else None
        offset = getattr(getattr(state, "position", None), "offset", None)
        out[part] = consumer.position(part) if offset is None else int(offset)
    return out
