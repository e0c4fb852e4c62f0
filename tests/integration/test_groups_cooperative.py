"""KIP-429 incremental cooperative rebalancing with real clients (confluent-kafka and
kafka-python, partition.assignment.strategy cooperative-sticky) against a real broker: while a
producer writes, a second member joins and later leaves. The first member only ever gives up
the partitions that move (never its whole assignment), and with a synchronous commit after every
message, no message is lost and the only ones consumed twice are those whose commit failed (a
commit racing a generation change gets ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS, as from
Kafka): the uncommitted window.

aiokafka 0.14 has no cooperative assignor (its assignors are range, roundrobin and the eager
sticky one), so it is not tested here.

Every wait is bounded: polls carry timeouts, loops deadlines, closes run in bounded threads.
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.errors import CommitFailedError, IllegalGenerationError, RebalanceInProgressError
from kafka.structs import OffsetAndMetadata

from tests.integration.test_groups import bounded, create_topic, rejoin_if_join_lost, unique
from tests.waiting import wait_for

PARTITIONS = 6
MESSAGES = 1200
WAIT_S = 90


class Member(threading.Thread):
    """One group member polled in its own thread: records every (partition, offset) it
    consumed, those whose synchronous commit failed, and every assignment change
    ("assign"/"revoke", partitions)."""

    def __init__(self, name: str) -> None:
        super().__init__(daemon=True, name=name)
        self.consumed: list[tuple[int, int]] = []
        self.uncommitted: set[tuple[int, int]] = set()
        self.events: list[tuple[str, frozenset[int]]] = []
        self.owned: set[int] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def on_assign(self, parts) -> None:
        parts = frozenset(parts)
        if parts:  # librdkafka also reports the empty first round of a cooperative join
            self.events.append(("assign", parts))
        self.owned |= parts

    def on_revoke(self, parts) -> None:
        parts = frozenset(parts)
        if parts:
            self.events.append(("revoke", parts))
        self.owned -= parts

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.poll_once()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"
        bounded(self.close, what=f"{self.name} close()")
        assert self.error is None, repr(self.error)


class ConfluentMember(Member):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(name)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "partition.assignment.strategy": "cooperative-sticky",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            }
        )
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: self.on_assign(p.partition for p in ps),
            on_revoke=lambda c, ps: self.on_revoke(p.partition for p in ps),
        )

    def poll_once(self) -> None:
        from confluent_kafka import KafkaException

        msg = self.consumer.poll(0.2)
        if msg is None or msg.error():
            return
        self.consumed.append((msg.partition(), msg.offset()))
        try:
            self.consumer.commit(message=msg, asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].fatal():
                raise
            self.uncommitted.add((msg.partition(), msg.offset()))

    def close(self) -> None:
        self.consumer.close()


class KafkaPythonMember(Member):
    def __init__(self, name: str, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(name)
        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.on_revoke(tp.partition for tp in revoked)

            def on_partitions_assigned(self, assigned):
                member.on_assign(tp.partition for tp in assigned)

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            partition_assignment_strategy=[CooperativeStickyAssignor],
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            max_poll_interval_ms=30000,
        )
        self.consumer.subscribe([topic], listener=Listener())

    def poll_once(self) -> None:
        for tp, records in self.consumer.poll(timeout_ms=200).items():
            for r in records:
                self.consumed.append((r.partition, r.offset))
                try:
                    self.consumer.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                except (CommitFailedError, RebalanceInProgressError, IllegalGenerationError):
                    self.uncommitted.add((r.partition, r.offset))
        rejoin_if_join_lost(self.consumer)

    def close(self) -> None:
        self.consumer.close(autocommit=False)


MEMBERS = {"confluent-kafka": ConfluentMember, "kafka-python": KafkaPythonMember}


class Producer(threading.Thread):
    """Writes MESSAGES messages round-robin over the partitions, a little at a time, and
    records the (partition, offset) of each acknowledged one."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5)
        self.topic = topic
        self.acked: list[tuple[int, int]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            futures = []
            for i in range(MESSAGES):
                futures.append(
                    self.producer.send(self.topic, f"m{i}".encode(), partition=i % PARTITIONS)
                )
                if i % 20 == 19:
                    time.sleep(0.05)
            for f in futures:
                md = f.get(timeout=30)
                self.acked.append((md.partition, md.offset))
        except BaseException as exc:
            self.error = exc
        finally:
            self.producer.close(timeout=30)


@pytest.mark.parametrize("client", sorted(MEMBERS))
def test_cooperative_sticky_member_joins_and_leaves(broker, client):
    topic, group = unique("coop"), unique("g")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    make = MEMBERS[client]
    producer = Producer(broker.bootstrap, topic)
    a = make("member-a", broker.bootstrap, group, topic)
    b = None
    everything = set(range(PARTITIONS))
    try:
        a.start()
        producer.start()
        wait_for(
            lambda: a.owned == everything and len(a.consumed) > 50,
            "a to own and read all",
            timeout=WAIT_S,
        )
        # a second member joins: a keeps consuming what it keeps
        b = make("member-b", broker.bootstrap, group, topic)
        b.start()
        wait_for(
            lambda: len(b.owned) == PARTITIONS // 2 and a.owned == everything - b.owned,
            "the partitions to be split",
            timeout=WAIT_S,
        )
        consumed_by_b = len(b.consumed)
        wait_for(
            lambda: len(b.consumed) > consumed_by_b + 10 or not producer.is_alive(),
            "b to read",
            timeout=WAIT_S,
        )
        moved = frozenset(b.owned)
        # ... and leaves: a takes the moved partitions back without giving any up
        b.stop()
        wait_for(lambda: a.owned == everything, "a to own everything again", timeout=WAIT_S)
        producer.join(WAIT_S)
        assert not producer.is_alive() and producer.error is None, repr(producer.error)
        # every acknowledged message, not as many as that: a message read twice must not make
        # up for one not read yet (a loaded machine showed it)
        wait_for(
            lambda: set(a.consumed) | set(b.consumed) >= set(producer.acked),
            "every message to be consumed",
            timeout=WAIT_S,
        )
        a_events = list(a.events)  # before close() revokes everything
    finally:
        a.stop()
        if b is not None and b.is_alive():
            b.stop()
    # incremental: a gave up exactly the partitions that moved, never its whole assignment
    assert a_events[0] == ("assign", frozenset(everything))
    assert [e for e in a_events if e[0] == "revoke"] == [("revoke", moved)]
    assert a_events[-1] == ("assign", moved)
    assert b.events[0] == ("assign", moved)
    # no loss; twice only what was consumed but not committed
    seen = collections.Counter(a.consumed + b.consumed)
    duplicates = {k for k, n in seen.items() if n > 1}
    uncommitted = a.uncommitted | b.uncommitted
    assert len(uncommitted) < 20, f"{len(uncommitted)} commits failed"
    assert duplicates <= uncommitted, f"consumed twice: {sorted(duplicates - uncommitted)[:10]}"
    assert set(seen) == set(producer.acked), f"lost: {sorted(set(producer.acked) - set(seen))[:10]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        committed = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    ends = collections.Counter(p for p, _ in producer.acked)
    assert {tp.partition: o.offset for tp, o in committed.items()} == dict(ends)
    assert all(isinstance(tp, TopicPartition) for tp in committed)
