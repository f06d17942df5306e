"""Broker groups: N stores, each written by its own job, that together hold a topic, as a RocketMQ
cluster spreads a topic's queues over its broker groups (broker-a, broker-b, ...).

Group K of N takes Kafka partition p when p mod N == K (ingest.kafka.groups: no partition count needed,
none moves when one is added) and stores it as queue p div N. Each group's ``config/topics.json`` gives its
own queue count, ceil((partitions - K) / N): with 8 partitions and 2 groups, broker-a holds
partitions 0, 2, 4, 6 as queues 0-3 and broker-b holds 1, 3, 5, 7 as queues 0-3. Every message keeps
its Kafka coordinates (KAFKA_PARTITION), so nothing depends on undoing the rule.

A store remembers its group in its commit point (sink.state): continuing it as another group, or
as the whole topic, would give queue ids another meaning, so the job refuses before it starts.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ingest.kafka.groups import PartitionGroup, PartitionGroupError, owned

if TYPE_CHECKING:
    from sink.state import SinkState

__all__ = ["BrokerGroup", "BrokerGroupError", "check_store_group", "owned"]

BrokerGroupError = PartitionGroupError     # a --broker-group that cannot be


class BrokerGroup(PartitionGroup):
    """Group K of N (``--broker-group K/N``): Kafka partition p is its queue p div N when p mod N == K."""

    def queue_id(self, partition: int) -> int:
        return partition // self.count

    @property
    def broker_name(self) -> str:
        """RocketMQ's usual name for the group (broker-a, broker-b, ..., broker-z, broker-27, ...)."""
        return f"broker-{chr(ord('a') + self.index)}" if self.index < 26 else f"broker-{self.index + 1}"


def check_store_group(store: str | Path, group: BrokerGroup | None, state: SinkState | None = None) -> None:
    """Refuse to continue a store as another group than the one that wrote it (or as the whole
    topic when a group wrote it, or the other way round). A store with nothing committed takes any.
    ``state``: the open writer's; by default read from the store's commit point."""
    from sink.state import SinkState
    from store import read_commit_point

    if state is None:
        point = read_commit_point(Path(store))
        if point is None:
            return
        state = SinkState.from_metadata(point.metadata)
    if state.empty:
        return
    held = state.broker_group
    asked = None if group is None else str(group)
    if held == asked:
        return
    what = f"broker group {held} (Kafka partitions p with p mod N = K)" if held else "every partition (no broker group)"
    fix = f"--broker-group {held}" if held else "no --broker-group"
    raise BrokerGroupError(f"--broker-group {asked or '(none)'}: the store {store} holds {what}; its queue ids "
                           f"would change meaning. Give {fix}, or another store")
