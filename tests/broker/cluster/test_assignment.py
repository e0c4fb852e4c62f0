"""Replica assignment against Kafka 0.10.1's own test expectations (AdminTest,
AdminRackAwareTest) and the rack-awareness properties they check."""

from __future__ import annotations

import random
import re
from collections import Counter

import pytest

from broker.admin.changes import PartitionCountError
from broker.cluster.assignment import AssignmentError, assign_replicas, rack_alternated
from broker.cluster.handlers import new_partitions
from broker.handlers.admin import TopicRequestError
from protocol.errors import ErrorCode


def test_rack_unaware_matches_kafka():
    brokers = {b: None for b in range(5)}
    got = assign_replicas(brokers, 10, 3, fixed_start=0)
    expected = {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }  # fmt: skip
    assert got == expected


def test_rack_aware_matches_kafka():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in racks.items() if b != 5}) == [0, 3, 1, 4, 2]
    got = assign_replicas(racks, 7, 3, fixed_start=0)
    expected = {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2),
        4: (4, 2, 0), 5: (2, 0, 3), 6: (0, 4, 2),
    }  # fmt: skip
    assert got == expected


@pytest.mark.parametrize("seed", range(20))
def test_rack_aware_properties(seed):
    rng = random.Random(seed)
    racks = {b: f"r{rng.randrange(3)}" for b in range(rng.randrange(3, 9))}
    rack_count = len(set(racks.values()))
    factor = rng.randrange(1, len(racks) + 1)
    got = assign_replicas(racks, 12, factor, rng=rng)
    for replicas in got.values():
        assert len(set(replicas)) == factor
        # as many racks as possible
        assert len({racks[b] for b in replicas}) == min(factor, rack_count)
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in racks) <= 12 // len(racks) + 1


def test_errors():
    with pytest.raises(AssignmentError, match="larger than available brokers"):
        assign_replicas({1: None, 2: None}, 3, 3)
    with pytest.raises(AssignmentError):
        assign_replicas({1: None}, 3, 0)
    with pytest.raises(AssignmentError):
        assign_replicas({1: None}, 0, 1)
    # brokers without a rack among racked ones: racks are ignored (Kafka's safe mode)
    got = assign_replicas({1: "a", 2: None, 3: "a"}, 3, 2, fixed_start=0)
    assert all(len(set(r)) == 2 for r in got.values())


FOUR = {b: None for b in range(4)}


def test_added_partitions_match_kafka():
    """Kafka's AddPartitionsTest (brokers 0-3): the added partitions continue where partition
    0's preferred replica stands, so preferred leaders keep spreading."""
    got = new_partitions({0: (2, 3, 0, 1)}, 7, None, FOUR)  # testReplicaPlacementAllServers
    assert [got[p][0] for p in range(1, 7)] == [3, 0, 1, 2, 3, 0]
    assert all(sorted(r) == [0, 1, 2, 3] for r in got.values())
    got = new_partitions({0: (1, 2)}, 3, None, FOUR)  # testReplicaPlacementPartialServers
    assert got == {1: (2, 0), 2: (3, 1)}
    # a preferred replica above every live broker id starts at the first broker
    assert new_partitions({0: (9, 8)}, 2, None, {1: None, 2: None}) == {1: (2, 1)}


def test_added_partitions_refused_as_kafka_does():
    with pytest.raises(PartitionCountError, match="currently has 2 partitions, which is higher"):
        new_partitions({0: (1,), 1: (2,)}, 1, None, FOUR)
    with pytest.raises(PartitionCountError, match="already has 2 partitions"):
        new_partitions({0: (1,), 1: (2,)}, 2, None, FOUR)
    cases = [
        ([[1, 7]], "Unknown broker(s) in replica assignment: 7."),
        ([[1, 2], [2, 3]], "Increasing the number of partitions by 1 but 2 assignments"),
        ([[]], "Cannot have replication factor of 0 for partition id 1."),
        ([[1, 1]], "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 1"),
        ([[1, 2, 3]], "partition 0 has 2 while partition 1 has 3 replicas"),
    ]
    for given, message in cases:
        with pytest.raises(TopicRequestError, match=re.escape(message)) as info:
            new_partitions({0: (1, 2)}, 2, given, FOUR)
        assert info.value.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert new_partitions({0: (1, 2)}, 3, [[3, 0], [0, 1]], FOUR) == {1: (3, 0), 2: (0, 1)}
    with pytest.raises(TopicRequestError) as info:
        new_partitions({0: (1, 2, 3)}, 2, None, {1: None, 2: None})
    assert info.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
