"""Consumer groups with real clients against a real broker process: kafka-python consumers
splitting and taking over partitions, commits surviving restart and kill -9, confluent-kafka
auto-commit with a bounded close(), aiokafka, kcat -G, kafka-python's admin group APIs, and
``chronolog groups``.

Every wait is bounded: polls carry timeouts, loops carry deadlines, closes run in threads that
must finish within CLOSE_TIMEOUT_S.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import RetriableError
from kafka.structs import OffsetAndMetadata

from tests.conftest import REPO
from tests.waiting import wait_for

CLOSE_TIMEOUT_S = 30
WAIT_S = 60
# Small session timeouts so failures are detected quickly; the broker must allow them.
FAST_GROUPS = {"group_min_session_timeout_ms": 1000}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def client_host_seen_by(bootstrap: str) -> str:
    """This machine's address as the broker sees it, in Kafka's InetAddress.toString form: under
    compose the runner reaches the broker from its container address, not 127.0.0.1."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return "/" + sock.getsockname()[0]


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)], timeout_ms=15000)
    finally:
        admin.close()


def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "m"
) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        for p in range(partitions):
            for i in range(per_partition):
                producer.send(topic, value=f"{tag}-{p}-{i}".encode(), partition=p)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=CLOSE_TIMEOUT_S)


def bounded(fn, timeout: float = CLOSE_TIMEOUT_S, what: str = "call"):
    """Run fn in a thread; fail the test if it has not returned within ``timeout``."""
    result: dict = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # reported in the test's thread
            result["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{what} did not return within {timeout} s"
    if "error" in result:
        raise result["error"]
    return result.get("value")


def kafka_consumer(bootstrap: str, group: str, **kw) -> KafkaConsumer:
    opts = dict(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        request_timeout_ms=20000,
        max_poll_interval_ms=20000,
    )
    opts.update(kw)
    return KafkaConsumer(**opts)


def rejoin_if_join_lost(consumer: KafkaConsumer) -> None:
    """Works around a kafka-python 3.0.12 bug: a rebalance the member starts itself (its
    metadata changed after it assigned) is lost when poll()'s timeout expires between the
    JoinGroup and SyncGroup answers. The join finishes in the background, but no later poll()
    takes its result, since need_rejoin() is False by then: the member never heartbeats again,
    and the coordinator drops it at the rebalance timeout while it keeps its old assignment.
    test_groups_restart's kill -9 test failed so in 3 of 24 runs with three CPU hogs beside,
    and in CI. (kafka-python 2.x checked for a pending join, dpkp/kafka-python#1695.) Asking
    for a rejoin makes the next poll() join again."""
    coordinator = consumer._coordinator
    task = coordinator._join_task
    if task is not None and task.is_done and not coordinator.need_rejoin():
        coordinator.request_rejoin()


class ConsumerFailedError(RuntimeError):
    """Raised by :attr:`PollingConsumer.assignment` once the consumer's thread has died of an
    error: a wait on the assignment then fails at once with that error, instead of timing out
    as if the group were slow to rebalance."""


class PollingConsumer(threading.Thread):
    """A kafka-python consumer polled in its own thread (each member must keep polling to
    take part in rebalances). Records what it received and its latest assignment."""

    def __init__(self, bootstrap: str, group: str, topic: str, **kw) -> None:
        super().__init__(daemon=True)
        self.consumer = kafka_consumer(bootstrap, group, **kw)
        # kafka-python 3.0.12's group leader assigns nothing for a subscribed topic its metadata
        # does not hold yet ("No partition metadata for topic"), and rejoins only when its next
        # metadata refresh notices: on a loaded machine the first join could win that race and
        # the member then owned nothing for minutes. Knowing the topic before joining avoids it.
        wait_for(
            lambda: bool(self.consumer.partitions_for_topic(topic)),
            f"the consumer's metadata to hold {topic}",
            timeout=WAIT_S,
        )
        self.consumer.subscribe([topic])
        self.records: list = []
        self._assignment: set[TopicPartition] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                for batch in self.consumer.poll(timeout_ms=200).values():
                    self.records.extend(batch)
                rejoin_if_join_lost(self.consumer)
                self._assignment = set(self.consumer.assignment())
            except RetriableError:
                # kafka-python 3.0.12 can raise a refused connection from poll() while the
                # broker restarts; Kafka's Java consumer retries it inside poll(), so do we.
                time.sleep(0.1)
            except BaseException as exc:
                self.error = exc
                return

    @property
    def assignment(self) -> set[TopicPartition]:
        """The partitions the consumer owned at its latest poll. Raises ConsumerFailedError
        when its thread has died of an error."""
        if self.error is not None:
            raise ConsumerFailedError(f"the consumer's poll loop died: {self.error!r}")
        return self._assignment

    def stop(self, close: bool = True) -> None:
        self.stop_event.set()
        self.join(CLOSE_TIMEOUT_S)
        assert not self.is_alive(), "consumer thread did not stop"
        if close:
            bounded(lambda: self.consumer.close(), what="KafkaConsumer.close()")
        assert self.error is None, repr(self.error)


def partitions(topic: str, n: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(n)}


# ---- kafka-python ----------------------------------------------------------------------------


def test_two_consumers_split_partitions_and_one_takes_over(broker):
    topic, group = unique("split"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, 4, 5)
    a = PollingConsumer(broker.bootstrap, group, topic)
    a.start()
    wait_for(
        lambda: a.assignment == partitions(topic, 4),
        "the first consumer to own all 4",
        timeout=WAIT_S,
    )
    b = PollingConsumer(broker.bootstrap, group, topic)
    b.start()
    try:
        wait_for(
            lambda: len(a.assignment) == 2
            and len(b.assignment) == 2
            and a.assignment | b.assignment == partitions(topic, 4),
            "two consumers to split 4 partitions 2/2",
            timeout=WAIT_S,
        )
        b.stop()  # close() sends LeaveGroup: a rebalances at once, not after a session timeout
        wait_for(
            lambda: a.assignment == partitions(topic, 4),
            "the survivor to take over all 4",
            timeout=WAIT_S,
        )
        produce(broker.bootstrap, topic, 4, 1, tag="after")
        wait_for(
            lambda: sum(r.value.startswith(b"after") for r in a.records) == 4,
            "the survivor to read new records on every partition",
            timeout=WAIT_S,
        )
    finally:
        b.stop_event.set()
        a.stop()


def test_failed_member_is_removed_after_session_timeout(broker_factory):
    broker = broker_factory(**FAST_GROUPS)
    topic, group = unique("expire"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    a = PollingConsumer(broker.bootstrap, group, topic)
    a.start()
    wait_for(
        lambda: a.assignment == partitions(topic, 2),
        "the first consumer to own both",
        timeout=WAIT_S,
    )
    # A second member in a child process, killed without LeaveGroup. It polls until killed:
    # a member that stops polling is made to leave by kafka-python's heartbeat thread once
    # max_poll_interval_ms passes, which on a loaded machine could end the split early.
    script = (
        "from kafka import KafkaConsumer\n"
        f"c = KafkaConsumer(bootstrap_servers={broker.bootstrap!r}, group_id={group!r},"
        " session_timeout_ms=3000, heartbeat_interval_ms=500, request_timeout_ms=20000,"
        " max_poll_interval_ms=20000)\n"
        f"c.subscribe([{topic!r}])\n"
        "seen = None\n"
        "while True:\n"
        "    c.poll(timeout_ms=200)\n"
        "    if len(c.assignment()) != seen:\n"
        "        seen = len(c.assignment())\n"
        "        print(seen, flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    child_owns: list[int] = []  # the child's assignment sizes, as it reports them

    def read_child() -> None:
        for line in child.stdout:
            child_owns.append(int(line))

    threading.Thread(target=read_child, daemon=True).start()
    try:
        wait_for(
            lambda: child_owns[-1:] == [1] and len(a.assignment) == 1,
            "the two members to own one partition each",
            timeout=WAIT_S,
        )
        child.kill()
        child.wait(10)
        t0 = time.monotonic()
        wait_for(
            lambda: a.assignment == partitions(topic, 2),
            "the dead member's session (3 s) to expire",
            timeout=30,
        )
        assert time.monotonic() - t0 >= 2.5  # not before the session timeout
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        a.stop()


def consume_exactly(bootstrap: str, group: str, topic: str, n: int, **kw) -> list:
    """Poll a fresh group member until it has n records (bounded), without committing."""
    consumer = kafka_consumer(bootstrap, group, **kw)
    consumer.subscribe([topic])
    got: list = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < n and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
        time.sleep(0.5)
        for batch in consumer.poll(timeout_ms=500).values():
            got.extend(batch)
    finally:
        bounded(lambda: consumer.close(autocommit=False), what="KafkaConsumer.close()")
    return got


@pytest.mark.parametrize("how", ["restart", "kill -9"])
def test_commits_survive_restart_and_next_consumer_resumes(broker_factory, how):
    broker = broker_factory()
    topic, group = unique("resume"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, 4, 10)
    consumer = kafka_consumer(broker.bootstrap, group)
    consumer.subscribe([topic])
    seen: dict[int, list[int]] = {p: [] for p in range(4)}
    deadline = time.monotonic() + WAIT_S
    while sum(map(len, seen.values())) < 40 and time.monotonic() < deadline:
        for tp, batch in consumer.poll(timeout_ms=500).items():
            seen[tp.partition].extend(r.offset for r in batch)
    assert all(offsets == list(range(10)) for offsets in seen.values()), seen
    # commit a different position per partition, with metadata
    told = {TopicPartition(topic, p): OffsetAndMetadata(3 + p, f"meta-{p}", -1) for p in range(4)}
    consumer.commit(told)
    if how == "kill -9":
        broker.kill()  # right after the commit was acknowledged
    else:
        bounded(lambda: consumer.close(autocommit=False), what="KafkaConsumer.close()")
        broker.stop()
    broker.start()
    if how == "kill -9":
        bounded(lambda: consumer.close(autocommit=False), what="KafkaConsumer.close()")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        stored = admin.list_group_offsets({group: list(told)})[group]
    finally:
        admin.close()
    assert {tp: (o.offset, o.metadata) for tp, o in stored.items()} == {
        tp: (o.offset, o.metadata) for tp, o in told.items()
    }
    got = consume_exactly(broker.bootstrap, group, topic, 40 - sum(3 + p for p in range(4)))
    by_partition: dict[int, list[int]] = {p: [] for p in range(4)}
    for r in got:
        by_partition[r.partition].append(r.offset)
    assert by_partition == {p: list(range(3 + p, 10)) for p in range(4)}


def test_kill_9_keeps_exactly_the_acknowledged_commits(broker_factory):
    broker = broker_factory()
    topic, group = unique("k9"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    consumer = kafka_consumer(broker.bootstrap, group)
    consumer.assign(partitions(topic, 2))
    last = {}
    for i in range(1, 31):
        last = {
            TopicPartition(topic, p): OffsetAndMetadata(i * 10 + p, f"commit {i}", -1)
            for p in range(2)
        }
        consumer.commit(last)  # raises unless the broker acknowledged it
    broker.kill()
    broker.start()
    got = {
        tp: bounded(lambda tp=tp: consumer.committed(tp, metadata=True), what="committed()")
        for tp in last
    }
    bounded(lambda: consumer.close(autocommit=False), what="KafkaConsumer.close()")
    assert {tp: (o.offset, o.metadata) for tp, o in got.items()} == {
        tp: (o.offset, o.metadata) for tp, o in last.items()
    }


def test_admin_group_apis(broker):
    topic, group = unique("admin"), unique("g")
    create_topic(broker.bootstrap, topic, 3)
    produce(broker.bootstrap, topic, 3, 4)
    a = PollingConsumer(broker.bootstrap, group, topic)
    a.start()
    try:
        wait_for(
            lambda: a.assignment == partitions(topic, 3) and len(a.records) == 12,
            "the consumer to own and read all partitions",
            timeout=WAIT_S,
        )
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(p + 1, "m", -1) for p in range(3)}
        a.consumer.commit(offsets)  # safe: poll() is not running concurrently
    except BaseException:
        a.stop()
        raise
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        listed = admin.list_groups()
        assert any(g["group_id"] == group and g["protocol_type"] == "consumer" for g in listed), (
            listed
        )
        d = admin.describe_groups([group])[group]
        assert (d["error"], d["group_state"], d["protocol_type"], d["protocol_data"]) == (
            None,
            "Stable",
            "consumer",
            "range",
        )
        (member,) = d["members"]
        assert member["client_host"] == client_host_seen_by(broker.bootstrap)
        assert member["member_metadata"]["topics"] == [topic]
        assert member["member_assignment"]["assigned_partitions"] == [
            {"topic": topic, "partitions": [0, 1, 2]}
        ]
        stored = admin.list_group_offsets({group: list(offsets)})[group]
        assert {tp: o.offset for tp, o in stored.items()} == {
            tp: p.offset for tp, p in offsets.items()
        }
    finally:
        admin.close()
        a.stop()


# ---- confluent-kafka -------------------------------------------------------------------------


def test_confluent_consumer_auto_commit_and_bounded_close(broker):
    from confluent_kafka import Consumer, TopicPartition as CTP

    topic, group = unique("ck"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, 4, 6)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 500,
            "session.timeout.ms": 10000,
        }
    )
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got) < 24 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append((msg.partition(), msg.offset()))
        assert sorted(got) == [(p, o) for p in range(4) for o in range(6)]
    finally:
        bounded(consumer.close, what="confluent Consumer.close()")
    # close() committed the final positions
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        stored = admin.list_group_offsets({group: list(partitions(topic, 4))})[group]
    finally:
        admin.close()
    assert {tp.partition: o.offset for tp, o in stored.items()} == {p: 6 for p in range(4)}
    # a second confluent consumer in the group starts exactly there
    produce(broker.bootstrap, topic, 4, 1, tag="next")
    c2 = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c2.subscribe([topic])
    got2 = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(got2) < 4 and time.monotonic() < deadline:
            msg = c2.poll(0.5)
            if msg is not None and not msg.error():
                got2.append((msg.partition(), msg.offset(), msg.value()))
        committed = c2.committed([CTP(topic, p) for p in range(4)], timeout=15)
    finally:
        bounded(c2.close, what="confluent Consumer.close()")
    assert sorted(got2) == [(p, 6, f"next-{p}-0".encode()) for p in range(4)]
    assert sorted((tp.partition, tp.offset) for tp in committed) == [(p, 6) for p in range(4)]


def test_mixed_clients_share_one_group(broker):
    """kafka-python and librdkafka members in one group: the coordinator picks a protocol both
    support (range) and the leader's assignment reaches the other client."""
    from confluent_kafka import Consumer

    topic, group = unique("mixed"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    a = PollingConsumer(broker.bootstrap, group, topic)
    a.start()
    wait_for(
        lambda: a.assignment == partitions(topic, 4), "kafka-python to own all 4", timeout=WAIT_S
    )
    ck = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "partition.assignment.strategy": "range",
        }
    )
    owned: set[int] = set()
    stop = threading.Event()

    def poll_ck():
        while not stop.is_set():
            ck.poll(0.2)
            owned.clear()
            owned.update(tp.partition for tp in ck.assignment())

    t = threading.Thread(target=poll_ck, daemon=True)
    ck.subscribe([topic])
    t.start()
    try:
        wait_for(
            lambda: len(owned) == 2
            and len(a.assignment) == 2
            and {tp.partition for tp in a.assignment} | owned == set(range(4)),
            "a 2/2 split between kafka-python and confluent-kafka",
            timeout=WAIT_S,
        )
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)

        def described() -> tuple:
            d = admin.describe_groups([group])[group]
            return d["group_state"], d["protocol_data"], len(d["members"])

        try:
            # A member may rejoin once more after the split (a CI run on a loaded machine saw
            # PreparingRebalance here); the group settles on range with both members.
            wait_for(
                lambda: described() == ("Stable", "range", 2),
                "the group Stable on range with both members",
                timeout=WAIT_S,
            )
        finally:
            admin.close()
    finally:
        stop.set()
        t.join(CLOSE_TIMEOUT_S)
        bounded(ck.close, what="confluent Consumer.close()")
    try:
        wait_for(
            lambda: a.assignment == partitions(topic, 4),
            "kafka-python to take all 4 back after confluent-kafka's close()",
            timeout=WAIT_S,
        )
    finally:
        a.stop()


def test_aiokafka_group_consumer_commits_and_resumes(broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer

    topic, group = unique("aio"), unique("g")
    create_topic(broker.bootstrap, topic, 4)
    produce(broker.bootstrap, topic, 4, 3)

    async def consume(n: int, commit: bool) -> list[tuple[int, int]]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await asyncio.wait_for(c.start(), WAIT_S)
        got: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + WAIT_S
            while len(got) < n and time.monotonic() < deadline:
                batches = await asyncio.wait_for(c.getmany(timeout_ms=500), WAIT_S)
                got.extend((r.partition, r.offset) for rs in batches.values() for r in rs)
            if commit:
                await asyncio.wait_for(c.commit(), WAIT_S)
        finally:
            await asyncio.wait_for(c.stop(), CLOSE_TIMEOUT_S)
        return got

    assert sorted(asyncio.run(consume(12, commit=True))) == [
        (p, o) for p in range(4) for o in range(3)
    ]
    produce(broker.bootstrap, topic, 4, 1, tag="more")
    assert sorted(asyncio.run(consume(4, commit=False))) == [(p, 3) for p in range(4)]


# ---- kcat -G ---------------------------------------------------------------------------------


def test_kcat_balanced_consumer(broker):
    topic, group = unique("kcat"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 2, 3)
    out = subprocess.run(
        [
            "kcat",
            "-b",
            broker.bootstrap,
            "-G",
            group,
            "-o",
            "beginning",
            "-e",
            "-X",
            "enable.auto.commit=true",
            "-X",
            "auto.commit.interval.ms=200",
            "-f",
            "%p:%o:%s\\n",
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert out.returncode == 0, out.stderr
    lines = sorted(line for line in out.stdout.splitlines() if line)
    assert lines == sorted(f"{p}:{o}:m-{p}-{o}" for p in range(2) for o in range(3))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        stored = admin.list_group_offsets({group: list(partitions(topic, 2))})[group]
    finally:
        admin.close()
    assert {tp.partition: o.offset for tp, o in stored.items()} == {0: 3, 1: 3}


# ---- chronolog groups --------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", "groups", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )


def test_chronolog_groups_cli(broker):
    topic, group = unique("cli"), unique("g")
    create_topic(broker.bootstrap, topic, 2)
    produce(broker.bootstrap, topic, 2, 5)
    a = PollingConsumer(broker.bootstrap, group, topic)
    a.start()
    try:
        wait_for(
            lambda: a.assignment == partitions(topic, 2) and len(a.records) == 10,
            "the consumer to own and read both partitions",
            timeout=WAIT_S,
        )
        a.stop_event.set()
        a.join(CLOSE_TIMEOUT_S)
        a.consumer.commit(
            {
                TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1),
                TopicPartition(topic, 1): OffsetAndMetadata(5, "", -1),
            }
        )
        a.consumer.poll(timeout_ms=100)  # keep the member alive (heartbeats run in a thread)
        listed = run_cli("--bootstrap-server", broker.bootstrap, "list")
        assert listed.returncode == 0, listed.stderr
        assert any(
            line.split() == [group, "consumer", "Stable"] for line in listed.stdout.splitlines()
        )
        desc = run_cli("--bootstrap-server", broker.bootstrap, "describe", group)
        assert desc.returncode == 0, desc.stderr
        lines = desc.stdout.splitlines()
        head = lines[0].split()
        assert head[:5] == ["GROUP", group, "STATE", "Stable", "GENERATION"] and int(head[5]) >= 1
        rows = {tuple(line.split()[:5]) for line in lines if line.startswith(topic)}
        assert rows == {(topic, "0", "2", "5", "3"), (topic, "1", "5", "5", "0")}
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
        try:
            (member,) = admin.describe_groups([group])[group]["members"]
        finally:
            admin.close()
        host = client_host_seen_by(broker.bootstrap)
        owners = {tuple(line.split()[5:7]) for line in lines if line.startswith(topic)}
        assert owners == {(member["member_id"], host)}
        members_header = lines.index(
            next(
                x for x in lines if x.split()[:3] == ["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID"]
            )
        )
        assert lines[members_header + 1].split() == [
            member["member_id"],
            "-",
            member["client_id"],
            host,
        ]
    finally:
        a.stop_event.set()
        bounded(lambda: a.consumer.close(), what="KafkaConsumer.close()")
    missing = run_cli("--bootstrap-server", "127.0.0.1:1", "list")
    assert missing.returncode == 1 and "cannot connect to 127.0.0.1:1" in missing.stderr


def test_offsets_topic_is_internal_to_real_clients(broker):
    from confluent_kafka import KafkaError, Producer

    group, topic = unique("g"), unique("int")
    create_topic(broker.bootstrap, topic, 1)
    committer = kafka_consumer(broker.bootstrap, group)
    try:
        committer.commit({TopicPartition(topic, 0): OffsetAndMetadata(3, "", -1)})
    finally:
        bounded(lambda: committer.close(), what="KafkaConsumer.close()")
    # librdkafka produces to any topic Metadata lists; the broker refuses with 17
    reports = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    producer.produce(
        "__consumer_offsets",
        key=b"forged",
        value=b"forged",
        partition=0,
        on_delivery=lambda err, msg: reports.append(err),
    )
    assert producer.flush(30) == 0
    assert [e.code() for e in reports] == [KafkaError.TOPIC_EXCEPTION]
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        assert "__consumer_offsets" in admin.list_topics()
        # kafka-python hides topics flagged is_internal
        assert "__consumer_offsets" not in consumer.topics()
        # the forged record did not disturb the committed offsets
        stored = admin.list_group_offsets({group: [TopicPartition(topic, 0)]})[group]
        assert {tp: o.offset for tp, o in stored.items()} == {TopicPartition(topic, 0): 3}
    finally:
        consumer.close()
        admin.close()
