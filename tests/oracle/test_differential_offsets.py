"""The same client calls against Apache Kafka 4.1.1 (the ``kafka_oracle`` fixture) and chronolog
(the session's ``broker``) give the same answers a user sees: the producer's acknowledgements,
``beginningOffsets`` / ``endOffsets`` / ``offsetsForTimes`` for every time asked, Admin
``listOffsets`` (earliest, latest, max timestamp, by time), Kafka's GetOffsetShell ``--time``,
and every record read back (offset, timestamp and its type, key, value, headers), over the same
records in 1 MiB segments (Kafka 4.1's smallest) with timestamps that do not only go up
(tests/oracle/scenarios.py); then, after Admin ``deleteRecords`` to the middle of the first
segment, the low watermark and the same offset and time look-ups again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.integration.clients import topic_name
from tests.oracle.kafka_oracle import GET_OFFSET_SHELL, JavaClients, run_kafka_tool
from tests.oracle.scenarios import first_at_or_after, query_times, timed_records

pytestmark = pytest.mark.kafka_oracle

RECORDS = 1500  # 2 KB each: 3 MB, three segments of 1 MiB
# Inside the first segment. Beyond it, answers differ for a while: Kafka removes a segment wholly
# below the log start offset at its next retention pass (every 5 minutes) and until then answers
# no offset for the times inside it; chronolog removes it at once and answers the log start offset
# (Kafka's answer after that pass).
DELETE_BEFORE = 300


def _scenario(server: Any, topic: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The calls against ``server`` (``broker`` or ``kafka_oracle``); the answers by call."""
    bootstrap = server.bootstrap
    asked = query_times([r["timestamp"] for r in records])
    queries = [[0, "earliest"], [0, "latest"], [0, "max_timestamp"]]
    queries += [[0, t] for t in asked[::15] + [asked[-1]]]
    answers: dict[str, Any] = {}
    with JavaClients(bootstrap) as clients:
        clients.call(
            "create_topic",
            topic=topic,
            partitions=1,
            configs={"retention.ms": "-1", "segment.bytes": "1048576"},
        )
        answers["acks"] = clients.call("produce", topic=topic, records=records, flush_every=25)[
            "records"
        ]
        offsets = clients.call("consumer_offsets", topic=topic, partitions=[0], timestamps=asked)
        answers["beginning"], answers["end"] = offsets["beginning"], offsets["end"]
        answers["for_times"] = offsets["for_times"]["0"]
        answers["list_offsets"] = clients.call("list_offsets", topic=topic, queries=queries)[
            "offsets"
        ]
        answers["records"] = clients.call("read_partition", topic=topic, partition=0)["records"]
        # Kafka's GetOffsetShell: the offset of a time in the middle (a record's timestamp + 1).
        shell = run_kafka_tool(
            GET_OFFSET_SHELL,
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--time",
            str(records[len(records) // 2]["timestamp"] + 1),
        )
        answers["get_offset_shell"] = shell.stdout.split()
        if server.log_dirs:  # not a CHRONOLOG_BOOTSTRAP broker
            segments = list((Path(server.log_dirs[0]) / f"{topic}-0").glob("*.log"))
            assert len(segments) >= 3, f"{bootstrap} should hold the records in several segments"

        # Then from DELETE_BEFORE on: the answers start at the log start offset.
        deleted = clients.call("delete_records", topic=topic, before={"0": DELETE_BEFORE})
        answers["low_watermarks"] = deleted["low_watermarks"]
        answers["after_delete"] = {
            "offsets": clients.call(
                "consumer_offsets", topic=topic, partitions=[0], timestamps=asked
            ),
            "list_offsets": clients.call("list_offsets", topic=topic, queries=queries)["offsets"],
        }
    return answers


def test_same_calls_same_answers(kafka_oracle, broker):
    records = timed_records(RECORDS, value_bytes=2000)
    topic = topic_name("diff-times")
    kafka = _scenario(kafka_oracle, topic, records)
    chronolog = _scenario(broker, topic, records)

    assert kafka["end"] == {"0": RECORDS}, "the scenario itself went wrong on Kafka"
    stored = [(a["offset"], a["timestamp"]) for a in kafka["acks"]]
    middle = first_at_or_after(stored, records[RECORDS // 2]["timestamp"] + 1)
    assert middle is not None
    assert kafka["get_offset_shell"] == [f"{topic}:0:{middle[0]}"]
    assert kafka["low_watermarks"] == {"0": DELETE_BEFORE}
    assert kafka["after_delete"]["offsets"]["beginning"] == {"0": DELETE_BEFORE}
    assert kafka["after_delete"]["offsets"]["for_times"]["0"][0]["offset"] == DELETE_BEFORE
    parts = ["acks", "beginning", "end", "for_times", "list_offsets", "get_offset_shell"]
    for part in parts + ["low_watermarks", "after_delete"]:
        assert chronolog[part] == kafka[part], part
    assert len(chronolog["records"]) == len(kafka["records"]) == RECORDS
    for ours, theirs in zip(chronolog["records"], kafka["records"]):
        assert ours == theirs
