"""Crash and clean restarts of the broker process."""

from __future__ import annotations

import os
import signal
import threading
import time

from protocol import ApiKey
from tests.integration.clients import create_topic, dump_log_verify, kp_consume_all, topic_name
from tests.integration.kafka_wire import WireClient, fetch_body, message_set, produce
from tests.integration.kafka_wire import create_topic as wire_create_topic
from tests.integration.test_metrics import FETCH_PURGATORY, scrape
from tests.waiting import wait_for


def test_kill9_mid_produce_keeps_every_acknowledged_message(broker_factory):
    b = broker_factory(
        {
            "log.flush.interval.messages": 1,
            "log.segment.bytes": 10000,
            "log.index.interval.bytes": 300,
        }
    )
    topic = topic_name("crash")
    create_topic(b.bootstrap, topic, 2)
    acked: dict[tuple[int, int], bytes] = {}
    stop = threading.Event()

    def produce_loop(partition: int) -> None:
        try:
            with WireClient(b.host, b.port) as c:
                i = 0
                while not stop.is_set():
                    values = [b"p%d-m%d-%d" % (partition, i, j) * 5 for j in range(4)]
                    r = produce(
                        c,
                        topic,
                        message_set(values, timestamps=[int(time.time() * 1000)] * 4),
                        partition=partition,
                        acks=-1,
                    )
                    assert r.error_code == 0
                    for j, v in enumerate(values):
                        acked[(partition, r.base_offset + j)] = v
                    i += 1
        except OSError:  # ConnectionError included: the broker died under us
            return

    threads = [threading.Thread(target=produce_loop, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 800 and time.monotonic() < deadline:
        time.sleep(0.05)
    b.kill()
    stop.set()
    for t in threads:
        t.join(30)
    assert len(acked) >= 800

    b.start()
    assert "no clean shutdown marker" in b.log_output(since_start=True)
    for partition in (0, 1):
        stored = {r.offset: r.value for r in kp_consume_all(b.bootstrap, topic, partition)}
        missing = [o for (p, o), v in acked.items() if p == partition and stored.get(o) != v]
        assert missing == [], f"partition {partition}: acknowledged offsets lost: {missing[:10]}"
    b.stop()

    assert len(dump_log_verify(b.log_dir, topic, (".index", ".timeindex"))) > 4


def test_clean_restart_needs_no_recovery_and_keeps_state(broker_factory):
    b = broker_factory()
    topic = topic_name("clean")
    create_topic(
        b.bootstrap,
        topic,
        3,
        configs={"message.timestamp.type": "LogAppendTime", "retention.ms": 123456789},
    )
    with WireClient(b.host, b.port) as c:
        first = produce(c, topic, message_set([b"a", b"b"], timestamps=[1, 2]), partition=2)
        cluster_id = c.call(ApiKey.METADATA, 2, {"topics": []}).cluster_id
    assert first.error_code == 0 and first.log_append_time_ms > 1
    assert b.stop() == 0
    assert "clean shutdown marker written" in b.log_output()

    b.start()
    since = b.log_output(since_start=True)
    assert "no recovery needed" in since and "no clean shutdown marker" not in since
    with WireClient(b.host, b.port) as c:
        meta = c.call(ApiKey.METADATA, 2, {"topics": [{"name": topic}]})
        assert meta.cluster_id == cluster_id
        assert len(meta.topics[0].partitions) == 3
        again = produce(c, topic, message_set([b"c"], timestamps=[3]), partition=2)
    # still a LogAppendTime topic after the restart (configs persisted), offsets continue
    assert again.base_offset == 2 and again.log_append_time_ms >= first.log_append_time_ms
    assert [r.value for r in kp_consume_all(b.bootstrap, topic, 2)] == [b"a", b"b", b"c"]
    registry = open(os.path.join(b.log_dir, "chronolog-topics.json")).read()
    assert '"retention.ms": "123456789"' in registry


def test_sigint_also_shuts_down_cleanly(broker_factory):
    b = broker_factory()
    b.proc.send_signal(signal.SIGINT)
    assert b.proc.wait(30) == 0
    assert "clean shutdown marker written" in b.log_output()


def test_sigterm_answers_a_waiting_fetch_before_exiting(broker_factory):
    b = broker_factory(metrics_listener="http://127.0.0.1:0")
    topic = topic_name("drain")
    with WireClient(b.host, b.port) as c:
        assert wire_create_topic(c, topic) == 0
        c.send(ApiKey.FETCH, 3, fetch_body(topic, max_wait_ms=60000, min_bytes=1))
        wait_for(
            lambda: scrape(b.metrics_url())[FETCH_PURGATORY] == 1,
            "the fetch parked in the long poll",
        )
        b.proc.send_signal(signal.SIGTERM)
        response = c.receive()  # answered (empty) instead of dropped
        assert response.api_key == ApiKey.FETCH
        assert response.body.responses[0].partitions[0].records == b""
    assert b.proc.wait(30) == 0


def test_flush_ms_and_checkpoints_run_in_the_background(broker_factory):
    b = broker_factory(
        {"log.flush.scheduler.interval.ms": 100, "log.flush.offset.checkpoint.interval.ms": 200}
    )
    topic = topic_name("flushms")
    create_topic(b.bootstrap, topic, configs={"flush.ms": 100})
    with WireClient(b.host, b.port) as c:
        assert produce(c, topic, message_set([b"a", b"b", b"c"])).error_code == 0
    path = os.path.join(b.log_dir, "recovery-point-offset-checkpoint")
    want = f"{topic} 0 3"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if os.path.exists(path) and want in open(path).read().splitlines():
            break
        time.sleep(0.1)
    assert want in open(path).read().splitlines()  # flushed by flush.ms, then checkpointed
