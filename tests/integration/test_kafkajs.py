"""KafkaJS 2.2.4 (node, from tests/integration/js) against a real broker: producer, consumer group and
admin fetchTopicOffsetsByTimestamp; the admin client's createTopics, describeConfigs, alterConfigs,
createPartitions and deleteTopicRecords."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.clients import KEEP_OLD_MESSAGES, create_topic, topic_name

JS_DIR = Path(__file__).resolve().parent / "js"
BASE_TS = 1_700_000_000_000

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules" / "kafkajs").is_dir(),
    reason="node or tests/integration/js/node_modules missing: run `make install-test`",
)


def run_kafkajs(bootstrap: str, topic: str, count: int) -> dict:
    done = subprocess.run(
        ["node", str(JS_DIR / "kafkajs_roundtrip.js"), bootstrap, topic, str(count), str(BASE_TS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_kafkajs_produce_group_consume_and_offsets_by_time(broker):
    topic = topic_name("kjs")
    create_topic(broker.bootstrap, topic, configs=KEEP_OLD_MESSAGES)
    count = 40
    seen = run_kafkajs(broker.bootstrap, topic, count)
    assert [p["errorCode"] for p in seen["produced"]] == [0]
    consumed = sorted(seen["consumed"], key=lambda m: m["offset"])
    assert [
        (m["offset"], m["key"], m["value"], m["timestamp"], m["headers"]) for m in consumed
    ] == [(i, f"k{i}", f"value-{i}", BASE_TS + i * 1000, {"seq": str(i)}) for i in range(count)]
    # the first offset at or after the middle timestamp is the middle message
    assert seen["byTime"] == [{"partition": 0, "offset": str(count // 2)}]


def test_kafkajs_admin_configs_partitions_and_records(broker):
    topic = topic_name("kjsadm")
    done = subprocess.run(
        ["node", str(JS_DIR / "kafkajs_admin.js"), broker.bootstrap, topic],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["created"] is True
    topic_res, broker_res = seen["described"]["resources"]
    assert (topic_res["resourceName"], topic_res["errorCode"]) == (topic, 0)
    entries = {c["configName"]: c for c in topic_res["configEntries"]}
    assert set(entries) == {"retention.ms", "segment.bytes"}
    assert entries["retention.ms"]["configValue"] == "3600000"
    assert entries["retention.ms"]["configSource"] == 1  # TOPIC_CONFIG
    assert entries["segment.bytes"]["isDefault"] is True
    assert [s["configName"] for s in entries["segment.bytes"]["configSynonyms"]] == [
        "log.segment.bytes"
    ]
    (hours,) = broker_res["configEntries"]
    assert (hours["configName"], hours["readOnly"], hours["configValue"]) == (
        "log.retention.hours",
        True,
        "168",
    )
    # KafkaJS's alterConfigs is the legacy AlterConfigs: the whole set is replaced
    altered = {c["configName"]: c for c in seen["altered"]["resources"][0]["configEntries"]}
    assert altered["cleanup.policy"]["configValue"] == "delete,compact"
    assert altered["retention.ms"]["configSource"] == 5  # back to DEFAULT_CONFIG
    assert seen["tooFew"] == "INVALID_PARTITIONS"
    offsets = {o["partition"]: o for o in seen["offsets"]}
    assert sorted(offsets) == [0, 1, 2, 3]
    assert (offsets[3]["low"], offsets[3]["high"]) == ("2", "5")
    (meta,) = seen["metadata"]["topics"]
    assert len(meta["partitions"]) == 4
    assert [b["nodeId"] for b in seen["cluster"]["brokers"]] == [0]
    assert seen["cluster"]["controller"] == 0
