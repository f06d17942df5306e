"""A share of a topic's partitions: group K of N reads the partitions p with p mod N == K (the
source option ``commitlog.brokerGroup``; ingest.broker_groups builds RocketMQ's broker groups on it).

The rule needs no partition count: a partition added later belongs to a group at once, and no
partition moves to another group when one is added (a split into ranges would move them)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

G = TypeVar("G", bound="PartitionGroup")
MAX_GROUPS = 1024


class PartitionGroupError(ValueError):
    """A group setting that cannot be; the message names it, its value and the limit."""


@dataclass(frozen=True)
class PartitionGroup:
    index: int      # K, 0-based
    count: int      # N

    @classmethod
    def parse(cls: type[G], text: str, option: str = "--broker-group") -> G:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not m:
            raise PartitionGroupError(f"{option} {text!r}: give K/N, group K of N groups (0 <= K < N), "
                                      "e.g. 0/2 and 1/2")
        index, count = int(m.group(1)), int(m.group(2))
        if not 1 <= count <= MAX_GROUPS:
            raise PartitionGroupError(f"{option} {text!r}: N = {count} groups; give 1 to {MAX_GROUPS}")
        if index >= count:
            raise PartitionGroupError(f"{option} {text!r}: K = {index} is not a group of {count} (0 to {count - 1})")
        return cls(index, count)

    def owns(self, partition: int) -> bool:
        return partition % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def owned(partitions: Sequence[tuple[str, int]], group: PartitionGroup | None) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of ``partitions`` that ``group`` takes (all without a group)."""
    return list(partitions) if group is None else [tp for tp in partitions if group.owns(tp[1])]
