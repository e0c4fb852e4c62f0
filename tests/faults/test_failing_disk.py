"""A log dir whose disk fails (EIO from the kernel) goes offline; the broker serves the others.

The failing disk is real: an ext4 image mounted through a loop device, whose backing file is
then cut to nothing, so every write and fsync that reaches it gets EIO (KIP-112's case). What a
user notices: producers to its partitions get KAFKA_STORAGE_ERROR, Metadata reports those
partitions without a leader and with an offline replica, reads of them answer
KAFKA_STORAGE_ERROR, one log line says the dir went offline, /metrics counts the failed append
in that dir's storage errors, and every partition in the other log dir keeps taking and serving
messages. Needs root and loop devices; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from protocol import ApiKey, ErrorCode, iter_deep
from tests.integration.kafka_wire import (
    WireClient,
    create_topic,
    fetch_partition,
    message_set,
    produce,
)
from tests.integration.test_metrics import scrape

TOPIC = "disks"
PARTITIONS = 4


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True)


class LoopDisk:
    """An ext4 filesystem on a loop device over ``image``, mounted at ``path``."""

    def __init__(self, image, path) -> None:
        self.image, self.path = image, path
        self.device: str | None = None

    def mount(self) -> str | None:
        """Set it up; the reason it cannot be, or None."""
        if os.geteuid() != 0:
            return "a loop-mounted filesystem needs root"
        with open(self.image, "wb") as f:
            f.truncate(64 << 20)
        steps = [
            ("mkfs.ext4", "-q", "-F", str(self.image)),
            ("losetup", "-f", "--show", str(self.image)),
        ]
        for step in steps:
            done = _run(*step)
            if done.returncode != 0:
                return f"{step[0]}: {done.stderr.strip()}"
        self.device = done.stdout.strip()
        self.path.mkdir()
        done = _run("mount", self.device, str(self.path))
        return f"mount: {done.stderr.strip()}" if done.returncode else None

    def fail(self) -> None:
        """Cut the backing file: from now on the device answers EIO."""
        os.truncate(self.image, 0)
        assert _run("losetup", "-c", self.device).returncode == 0

    def remove(self) -> None:
        _run("umount", "-l", str(self.path))
        if self.device:
            _run("losetup", "-d", self.device)


@pytest.fixture
def loop_disk(tmp_path):
    disk = LoopDisk(tmp_path / "disk.img", tmp_path / "disk")
    try:
        reason = disk.mount()
        if reason:
            pytest.skip(f"no loop-mounted filesystem here: {reason}")
        yield disk
    finally:
        disk.remove()


def list_offset(client: WireClient, partition: int):
    body = {
        "replica_id": -1,
        "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": partition, "timestamp": -1}]}
        ],
    }
    return client.call(ApiKey.LIST_OFFSETS, 1, body).topics[0].partitions[0]


def test_a_failing_disk_takes_its_log_dir_offline_and_the_rest_keeps_serving(
    broker_factory, tmp_path, loop_disk
):
    good, bad = tmp_path / "good", loop_disk.path / "logs"
    broker = broker_factory(
        # The registry lives in the first log dir; every append is fsynced, so EIO surfaces.
        {
            "log.dirs": f"{good},{bad}",
            "log.flush.interval.messages": 1,
            "metrics.listener": "http://127.0.0.1:0",
        }
    )
    with WireClient(broker.host, broker.port) as client:
        assert create_topic(client, TOPIC, PARTITIONS) == 0
        on_bad = {
            p for p in range(PARTITIONS) if (loop_disk.path / "logs" / f"{TOPIC}-{p}").exists()
        }
        assert on_bad and len(on_bad) < PARTITIONS
        for p in range(PARTITIONS):
            assert (
                produce(
                    client, TOPIC, message_set([b"before"], magic=2), partition=p, acks=-1
                ).error_code
                == 0
            )

        loop_disk.fail()
        for p in range(PARTITIONS):
            answer = produce(
                client, TOPIC, message_set([b"after"], magic=2), partition=p, acks=-1, version=9
            )
            expected = ErrorCode.KAFKA_STORAGE_ERROR if p in on_bad else ErrorCode.NONE
            assert answer.error_code == expected, (p, answer)

        metadata = client.call(ApiKey.METADATA, 9, {"topics": [{"name": TOPIC}]})
        for part in metadata.topics[0].partitions:
            if part.partition_index in on_bad:
                assert part.error_code == ErrorCode.LEADER_NOT_AVAILABLE
                assert part.leader_id == -1 and part.offline_replicas == [0]
            else:
                assert part.error_code == 0 and part.leader_id == 0 and part.offline_replicas == []
        for p in range(PARTITIONS):
            read, end = fetch_partition(client, TOPIC, p), list_offset(client, p)
            if p in on_bad:
                assert read.error_code == ErrorCode.KAFKA_STORAGE_ERROR
                assert end.error_code == ErrorCode.KAFKA_STORAGE_ERROR
            else:
                assert read.error_code == 0 and end.error_code == 0 and end.offset == 2
                values = [m.value for m in iter_deep(bytes(read.records))]
                assert values == [b"before", b"after"]
        # The append that met EIO is the failing dir's storage error; the healthy dir has none.
        # Later requests for its partitions are refused without touching the disk.
        errors = {
            labels[0][1]: value
            for (name, labels), value in scrape(broker.metrics_url()).items()
            if name == "chronolog_log_storage_errors_total"
        }
        assert errors == {str(good): 0, str(bad): 1}
        # Still serving the healthy dir.
        good_p = min(set(range(PARTITIONS)) - on_bad)
        assert (
            produce(
                client, TOPIC, message_set([b"later"], magic=2), partition=good_p, acks=-1
            ).error_code
            == 0
        )

    events = [
        json.loads(x).get("event") for x in broker.log_output().splitlines() if x.startswith("{")
    ]
    assert events.count("log dir offline: its partitions are not served until a restart") == 1
    assert broker.stop() == 1  # what the failed dir held may not have reached the disk
    assert "log dir offline at shutdown" in broker.log_output()
