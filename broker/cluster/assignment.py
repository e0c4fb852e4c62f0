"""Replica assignment for new topics: Kafka 0.10.1's AdminUtils.assignReplicasToBrokers.

Without racks, partition p's first replica is broker ``(p + start) % n`` and the others follow
at a shift that grows every n partitions, so leaders and followers spread evenly. With
``broker.rack`` on every broker (KIP-36), the brokers are first listed alternating between
racks and each partition's replicas go to as many different racks as possible. Brokers are
taken in id order; ``start`` and ``shift`` are random unless fixed (tests).
"""

from __future__ import annotations

import random
from collections.abc import Mapping


class AssignmentError(Exception):
    """Raised when the request cannot be assigned: a replication factor above the brokers
    available, or no partitions; the message says which."""


def assign_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    fixed_start: int = -1,
    start_partition: int = 0,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """``{partition: replicas}`` for ``partitions`` new partitions numbered from
    ``start_partition``; ``brokers`` maps each live broker id to its rack (None: none). Racks
    are used only when every broker has one. Raises AssignmentError."""
    if partitions <= 0:
        raise AssignmentError(f"number of partitions must be larger than 0, not {partitions}")
    if replication_factor <= 0:
        raise AssignmentError(f"replication factor must be larger than 0, not {replication_factor}")
    if replication_factor > len(brokers):
        raise AssignmentError(
            f"replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}"
        )
    rng = rng or random.Random()
    racks = {b: r for b, r in brokers.items() if r is not None}
    if len(racks) == len(brokers) and racks:
        arranged = rack_alternated(racks)
        rack_count = len(set(racks.values()))
    else:
        arranged = sorted(brokers)
        rack_count = 0
    n = len(arranged)
    start = fixed_start if fixed_start >= 0 else rng.randrange(n)
    shift = fixed_start if fixed_start >= 0 else rng.randrange(n)
    result: dict[int, tuple[int, ...]] = {}
    for partition in range(start_partition, start_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        replicas = [arranged[first]]
        if not rack_count:
            replicas += [
                arranged[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)
            ]
        else:
            used_racks = {racks[arranged[first]]}
            used = {arranged[first]}
            k = 0
            for _ in range(replication_factor - 1):
                while True:
                    broker = arranged[_replica_index(first, shift * rack_count, k, n)]
                    rack = racks[broker]
                    k += 1
                    if (rack not in used_racks or len(used_racks) == rack_count) and (
                        broker not in used or len(used) == n
                    ):
                        replicas.append(broker)
                        used_racks.add(rack)
                        used.add(broker)
                        break
        result[partition] = tuple(replicas)
    return result


def _replica_index(first: int, shift: int, replica: int, n: int) -> int:
    return (first + 1 + (shift + replica) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Broker ids alternating over the racks (sorted by name), each rack's brokers in id
    order: {0: a, 1: a, 2: b, 3: c} -> [0, 2, 3, 1]."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(racks):
        by_rack.setdefault(racks[broker], []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    result: list[int] = []
    i = 0
    while len(result) < len(racks):
        queue = queues[i % len(queues)]
        if queue:
            result.append(queue.pop(0))
        i += 1
    return result
