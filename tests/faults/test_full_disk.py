"""A broker whose log dir is on a real, small, full filesystem (a tmpfs this test mounts).

What a user notices: producers get KAFKA_STORAGE_ERROR (NOT_LEADER_FOR_PARTITION before Produce
v4), which clients retry; every acknowledged message stays readable; the broker keeps serving;
one log line says the partition started failing and one that it recovered; /metrics counts the
refused appends in the log dir's storage errors; writes resume by themselves when space returns; a clean stop leaves segments that ``dump-log --verify`` passes.
Needs root (mount); skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import time

import pytest

from protocol import ApiKey, ErrorCode
from storage.dump import main as dump_log
from tests.faults.helpers import fill, fill_rest, values
from tests.integration.kafka_wire import WireClient, create_topic, message_set, produce
from tests.integration.test_metrics import scrape

VALUE = b"v" * 20_000
TOPIC = "full"
DAY_MS = 86_400_000


def produce_until_refused(client, version: int) -> tuple[list[tuple[int, bytes]], object]:
    acknowledged = []
    deadline = time.monotonic() + 60
    for i in range(10_000):
        assert time.monotonic() < deadline, "the disk never filled"
        value = VALUE + b"%d" % i
        answer = produce(client, TOPIC, message_set([value], magic=2), acks=-1, version=version)
        if answer.error_code != 0:
            return acknowledged, answer
        acknowledged.append((answer.base_offset, value))
    raise AssertionError("10,000 produces fit an 8 MiB filesystem")


@pytest.mark.parametrize(
    "version, expected",
    [(9, ErrorCode.KAFKA_STORAGE_ERROR), (3, ErrorCode.NOT_LEADER_FOR_PARTITION)],
)
def test_a_full_disk_refuses_clearly_loses_nothing_and_heals(
    broker_factory, small_fs, version, expected
):
    log_dir = str(small_fs / "logs")
    broker = broker_factory(
        {
            "log.dirs": log_dir,
            "log.segment.bytes": 1 << 20,
            "metrics.listener": "http://127.0.0.1:0",
        },
    )
    storage_errors = ("chronolog_log_storage_errors_total", (("log_dir", log_dir),))
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC) == 0
        fill(small_fs, leave=3 << 20)
        acknowledged, refused = produce_until_refused(client, version)
        assert refused.error_code == expected, refused
        assert len(acknowledged) > 10
        # Refused again while full; the broker keeps serving reads of everything acknowledged.
        again = produce(client, TOPIC, message_set([VALUE], magic=2), acks=-1, version=version)
        assert again.error_code == expected
        # /metrics counted both refused appends in that log dir
        assert scrape(broker.metrics_url())[storage_errors] == 2
        assert values(client, TOPIC) == acknowledged
        assert (
            len(
                broker.log_events(
                    "appends to the partition are failing; producers get KAFKA_STORAGE_ERROR",
                )
            )
            == 1
        )

        # Space returns: the next produce is stored right after the last acknowledged one.
        os.unlink(small_fs / "filler")
        healed = produce(client, TOPIC, message_set([b"after"], magic=2), acks=-1)
        assert healed.error_code == 0, healed
        assert healed.base_offset == acknowledged[-1][0] + 1
        assert values(client, TOPIC) == [*acknowledged, (healed.base_offset, b"after")]
    assert len(broker.log_events("appends to the partition succeed again")) == 1

    assert broker.stop() == 0
    segments = sorted(
        str(p) for p in (small_fs / "logs" / f"{TOPIC}-0").iterdir() if p.suffix in (".log",)
    )
    assert len(segments) > 1
    assert dump_log(["--verify", *segments]) == 0


def test_delete_topics_frees_a_full_disk(broker_factory, small_fs):
    broker = broker_factory({"log.dirs": str(small_fs / "logs"), "log.segment.bytes": 1 << 20})
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC) == 0
        assert create_topic(client, "kept") == 0
        produce(client, "kept", message_set([b"kept"], magic=2), acks=-1)
        fill(small_fs, leave=3 << 20)
        produce_until_refused(client, 9)
        fill_rest(small_fs)
        body = {"topic_names": [TOPIC], "timeout_ms": 10000}
        deleted = client.call(ApiKey.DELETE_TOPICS, 0, body).responses[0]
        assert deleted.error_code == 0, deleted
        assert not (small_fs / "logs" / f"{TOPIC}-0").exists()
        assert values(client, "kept") == [(0, b"kept")]
    assert broker.stop() == 0
    broker.start()
    with WireClient(broker.host, broker.port) as client:
        metadata = client.call(ApiKey.METADATA, 1, {"topics": None})
        assert sorted(t.name for t in metadata.topics if not t.is_internal) == ["kept"]
        assert values(client, "kept") == [(0, b"kept")]


def test_sigterm_on_a_full_disk_stops_in_order(broker_factory, small_fs):
    broker = broker_factory({"log.dirs": str(small_fs / "logs"), "log.segment.bytes": 1 << 20})
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC) == 0
        fill(small_fs, leave=3 << 20)
        acknowledged, _ = produce_until_refused(client, 9)
        fill_rest(small_fs)
    assert broker.stop() == 0, broker.log_tail()
    assert "cannot start" not in broker.log_output()
    os.unlink(small_fs / "filler")
    broker.start()
    with WireClient(broker.host, broker.port) as client:
        assert values(client, TOPIC) == acknowledged


def test_retention_frees_a_full_disk_and_writes_resume(broker_factory, small_fs):
    broker = broker_factory(
        {
            "log.dirs": str(small_fs / "logs"),
            "log.segment.bytes": 256 << 10,
            "log.retention.check.interval.ms": 100,
            "log.segment.delete.delay.ms": 0,
            "log.retention.ms": DAY_MS,
        }
    )
    # Messages one day old but for a few seconds: retention deletes them soon after the disk
    # is full, and nothing else frees space.
    expires = int(time.time() * 1000) - DAY_MS + 6000
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC) == 0
        fill(small_fs, leave=2 << 20)
        for i in range(10_000):
            records = message_set([VALUE], magic=2, timestamps=[expires])
            answer = produce(client, TOPIC, records, acks=-1, version=9)
            if answer.error_code:
                break
        assert answer.error_code == ErrorCode.KAFKA_STORAGE_ERROR, answer
        deadline = time.monotonic() + 30
        while True:
            answer = produce(client, TOPIC, message_set([VALUE], magic=2), acks=-1, version=9)
            if answer.error_code == 0:
                break
            assert time.monotonic() < deadline, "retention never freed the disk"
            time.sleep(0.2)
        assert values(client, TOPIC, answer.base_offset) == [(answer.base_offset, VALUE)]
    assert broker.log_events("retention deleted segments")


def test_group_offsets_are_read_on_a_full_disk_and_commits_are_retried(broker_factory, small_fs):
    broker = broker_factory({"log.dirs": str(small_fs / "logs")})
    commit = {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time_ms": -1,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
    }
    fetch_offsets = {"group_id": "g", "topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC) == 0
        produce(client, TOPIC, message_set([b"a", b"b"], magic=2), acks=-1)
        answer = client.call(ApiKey.OFFSET_COMMIT, 2, commit)
        assert answer.topics[0].partitions[0].error_code == 0
        fill(small_fs, leave=0)
        fill_rest(small_fs)
        # Metadata larger than a page: the write needs space (a full tmpfs still takes what fits
        # in the last page of a file).
        commit["topics"][0]["partitions"][0].update(
            committed_offset=2, committed_metadata="m" * 4000
        )
        answer = client.call(ApiKey.OFFSET_COMMIT, 2, commit)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR_FOR_GROUP
        read = client.call(ApiKey.OFFSET_FETCH, 1, fetch_offsets).topics[0].partitions[0]
        assert (read.error_code, read.committed_offset) == (0, 1)
        os.unlink(small_fs / "filler")
        answer = client.call(ApiKey.OFFSET_COMMIT, 2, commit)
        assert answer.topics[0].partitions[0].error_code == 0
        read = client.call(ApiKey.OFFSET_FETCH, 1, fetch_offsets).topics[0].partitions[0]
        assert read.committed_offset == 2
