"""Group state that survives the broker: after kill -9 and a restart, ``chronolog groups
describe`` shows the same generation, members and assignments, and the group-metadata record in
``__consumer_offsets`` (read back with kafka-python and decoded by the independent oracle in
offsets_oracle.py) says the same, in the value version inter.broker.protocol.version selects;
live consumers carry on without a rebalance. And static membership (KIP-345, confluent-kafka
with group.instance.id): a member restarted within its session timeout gets its partitions back
without a rebalance.

Every wait is bounded (see test_groups.py's helpers).
"""

from __future__ import annotations

import threading
import time

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from tests.integration.offsets_oracle import last_group_record
from tests.integration.test_groups import (
    WAIT_S,
    PollingConsumer,
    bounded,
    create_topic,
    partitions,
    produce,
    run_cli,
    unique,
)
from tests.waiting import WaitTimeoutError, wait_for


def describe(bootstrap: str, group: str) -> tuple[str, int, set[str], dict[tuple[int], str]]:
    """(state, generation, member ids, {partition: owner}) as ``chronolog groups describe``
    prints them."""
    out = run_cli("--bootstrap-server", bootstrap, "describe", group)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = lines[0].split()
    assert head[0:3] == ["GROUP", group, "STATE"] and head[4] == "GENERATION", lines[0]
    members_at = next(i for i, x in enumerate(lines) if x.startswith("MEMBER-ID"))
    rows_at = next(i for i, x in enumerate(lines) if x.startswith("TOPIC"))
    members = {line.split()[0] for line in lines[members_at + 1 : rows_at]}
    owners = {int(line.split()[1]): line.split()[5] for line in lines[rows_at + 1 :]}
    return head[3], int(head[5]), members, owners


def record_view(record: dict) -> tuple[int, set[str], dict[int, str]]:
    """(generation, member ids, {partition: owner}) of a decoded group-metadata record."""
    owners = {}
    for m in record["members"]:
        for tp in ConsumerProtocolAssignment.decode(m["assignment"]).partitions():
            owners[tp.partition] = m["memberId"]
    return record["generation"], {m["memberId"] for m in record["members"]}, owners


# The group-metadata value version Kafka writes at each inter.broker.protocol.version: 3 by
# default, 1 at 2.0 (for readers such as Burrow 1.2.1); replay reads both.
@pytest.mark.parametrize("ibp, value_version", [("3.9", 3), ("2.0", 1)])
def test_kill_9_restart_keeps_generation_members_and_assignments(
    broker_factory, ibp, value_version
):
    broker = broker_factory(group_min_session_timeout_ms=1000, inter_broker_protocol_version=ibp)
    topic, group = unique("rs"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    kw = dict(session_timeout_ms=30000, heartbeat_interval_ms=1000)
    a = PollingConsumer(broker.bootstrap, group, topic, **kw)
    a.start()
    b = None
    try:
        # one after the other, as test_groups does: a first member that joins before its
        # metadata names the topic makes kafka-python 3.0.12's leader stall now and then
        wait_for(
            lambda: a.assignment == partitions(topic, 4), "a to own every partition", timeout=WAIT_S
        )
        b = PollingConsumer(broker.bootstrap, group, topic, **kw)
        b.start()
        try:
            wait_for(
                lambda: len(a.assignment) == len(b.assignment) == 2
                and a.assignment | b.assignment == partitions(topic, 4),
                "two members to split four partitions",
                timeout=WAIT_S,
            )
        except WaitTimeoutError as exc:
            # What each side saw: a lost join (rejoin_if_join_lost) looked like this.
            raise WaitTimeoutError(
                f"{exc}; a owns {sorted(a.assignment)}, b owns {sorted(b.assignment)}; the "
                f"broker says {describe(broker.bootstrap, group)}; its log:\n{broker.log_tail()}"
            ) from exc
        wait_for(
            lambda: describe(broker.bootstrap, group)[0] == "Stable",
            "a Stable group",
            timeout=WAIT_S,
        )
        before = describe(broker.bootstrap, group)
        state, generation, members, owners = before
        assert len(members) == 2 and set(owners) == {0, 1, 2, 3}
        record = last_group_record(broker.bootstrap, group)
        assert record["version"] == value_version and record["protocolType"] == "consumer"
        assert record_view(record) == (generation, members, owners)
        broker.kill()
        broker.start()
        assert describe(broker.bootstrap, group) == before
        assert last_group_record(broker.bootstrap, group) == record
        # the consumers reconnect and go on heartbeating in the same generation: no rebalance
        assigned = (set(a.assignment), set(b.assignment))
        produce(broker.bootstrap, topic, 4, 2, tag="after")

        def after():
            return sorted(r.value for r in a.records + b.records if r.value.startswith(b"after"))

        wait_for(lambda: len(after()) == 8, "the new messages to be read", timeout=WAIT_S)
        assert after() == sorted(f"after-{p}-{i}".encode() for p in range(4) for i in range(2))
        assert (a.assignment, b.assignment) == assigned
        assert describe(broker.bootstrap, group) == before
    finally:
        a.stop()
        if b is not None:
            b.stop()


class StaticMember(threading.Thread):
    """A confluent-kafka consumer with group.instance.id, polled in its own thread; records
    its rebalance callbacks and current assignment."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str) -> None:
        super().__init__(daemon=True, name=instance)
        from confluent_kafka import Consumer

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "group.instance.id": instance,
                "client.id": instance,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 30000,
                "heartbeat.interval.ms": 500,
            }
        )
        self.events: list[tuple[str, frozenset[int]]] = []
        self.assignment: frozenset[int] = frozenset()
        self.consumer.subscribe([topic], on_assign=self.on_assign, on_revoke=self.on_revoke)
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def on_assign(self, consumer, parts) -> None:
        self.assignment = frozenset(p.partition for p in parts)
        self.events.append(("assign", self.assignment))

    def on_revoke(self, consumer, parts) -> None:
        self.events.append(("revoke", frozenset(p.partition for p in parts)))
        self.assignment = frozenset()

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.consumer.poll(0.2)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert not self.is_alive()
        bounded(self.consumer.close, what=f"{self.name} close()")
        assert self.error is None, repr(self.error)


def test_static_member_restarted_within_its_session_timeout_causes_no_rebalance(broker):
    topic, group = unique("static"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    a = StaticMember(broker.bootstrap, group, topic, "instance-a")
    b = StaticMember(broker.bootstrap, group, topic, "instance-b")
    a.start()
    b.start()
    restarted = None
    try:
        wait_for(
            lambda: len(a.assignment) == len(b.assignment) == 2
            and describe(broker.bootstrap, group)[0] == "Stable",
            "two static members to split four partitions",
            timeout=WAIT_S,
        )
        state, generation, members, owners = describe(broker.bootstrap, group)
        b_events = list(b.events)
        a_partitions = a.assignment
        a.stop()  # a static member does not leave the group when it closes
        time.sleep(1)
        assert describe(broker.bootstrap, group)[:3] == ("Stable", generation, members)
        restarted = StaticMember(broker.bootstrap, group, topic, "instance-a")
        restarted.start()
        wait_for(lambda: restarted.assignment, "the restarted member's assignment", timeout=WAIT_S)
        assert restarted.assignment == a_partitions
        state2, generation2, members2, owners2 = describe(broker.bootstrap, group)
        assert (state2, generation2) == ("Stable", generation)
        assert len(members2) == 2 and len(members & members2) == 1  # a's id was replaced
        # the other member saw no rebalance at all
        time.sleep(2)
        assert b.events == b_events
        record = last_group_record(broker.bootstrap, group)
        assert record_view(record)[:2] == (generation, members2)
        instances = {m["memberId"]: m["groupInstanceId"] for m in record["members"]}
        assert sorted(instances.values()) == ["instance-a", "instance-b"]
    finally:
        for m in (a, b, restarted):
            if m is not None and m.is_alive():
                m.stop()
