"""Kafka Streams 4.1.1 with at-least-once processing (its default guarantee) on chronolog, across a
broker kill -9 while the apps are working: nothing is lost, and what is repeated is only what
at-least-once allows.

Two apps read one input topic of keyed lines (tests/jvm Clients.java): a word count (a repartition
topic and a state store with its changelog) and a stateless app that writes each line upper-cased
under its key. Before the kill both equal brute force exactly. The kill comes once the apps have
started on a second batch of input; after the restart, every word's last count is at least its
count by brute force (a line processed twice counts twice; a line lost would count less) and the
stateless output, deduplicated by key, equals the input transformed. (The apps outlive the broker,
so they resume from their own positions: in the runs here nothing was repeated at all.)
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.clients import topic_name
from tests.oracle.kafka_oracle import JavaClients

# The module's own broker (it is killed, every message flushed) and Java clients, as there.
from tests.oracle.test_transactions_jvm import chronolog, clients
from tests.waiting import wait_for

pytestmark = pytest.mark.kafka_oracle

WORDS = ["apple", "pear", "fig", "plum", "kiwi", "lime", "date"]
PARTITIONS = 2
__all__ = ["chronolog", "clients"]  # fixtures used by name


def _lines(start: int, count: int) -> dict[str, str]:
    """{key: line} for lines start..start+count-1."""
    return {
        f"line-{i}": " ".join(WORDS[(i * 3 + j * 5) % len(WORDS)] for j in range(1 + i % 4))
        for i in range(start, start + count)
    }


def _read_all(clients: JavaClients, topic: str) -> list[tuple[str, str]]:
    """(key, value) of every record of ``topic``, partition by partition, in offset order."""
    return [
        (r["key"], r["value"])
        for p in range(PARTITIONS)
        for r in clients.call("read_partition", topic=topic, partition=p)["records"]
    ]


def _last_counts(clients: JavaClients, topic: str) -> dict[str, int]:
    last: dict[str, int] = {}
    for word, count in _read_all(clients, topic):
        last[word] = int(count)  # one word's counts are in one partition, in order
    return last


def _start(clients: JavaClients, op: str, name: str, source: str, output: str, state_dir) -> None:
    clients.call(
        op,
        name=name,
        application_id=topic_name(name),
        input=source,
        output=output,
        config={
            "processing.guarantee": "at_least_once",
            "commit.interval.ms": 1000,
            "state.dir": str(state_dir),
            "num.stream.threads": 1,
            "replication.factor": 1,
        },
    )


def test_streams_at_least_once_across_a_kill9(clients, chronolog, tmp_path):
    source, counts, upper = (topic_name(f"alos-{t}") for t in ("lines", "counts", "upper"))
    for topic in (source, counts, upper):
        clients.call("create_topic", topic=topic, partitions=PARTITIONS)
    lines = _lines(0, 150)
    clients.call(
        "produce", topic=source, records=[{"key": k, "value": v} for k, v in lines.items()]
    )
    _start(clients, "streams_word_count", "wc", source, counts, tmp_path / "wc")
    _start(clients, "streams_upper", "up", source, upper, tmp_path / "up")
    try:

        def brute_force() -> dict[str, int]:
            return dict(Counter(w for line in lines.values() for w in line.split(" ")))

        # No failure yet: both equal brute force exactly.
        wait_for(lambda: _last_counts(clients, counts) == brute_force(), "the first counts")
        wait_for(
            lambda: dict(_read_all(clients, upper)) == {k: v.upper() for k, v in lines.items()},
            "the first lines upper-cased",
        )
        assert len(_read_all(clients, upper)) == len(lines)

        # Killed once the apps have started on the second batch, before they can be done.
        second = _lines(150, 600)
        lines.update(second)
        clients.call(
            "produce", topic=source, records=[{"key": k, "value": v} for k, v in second.items()]
        )
        wait_for(
            lambda: len(_read_all(clients, upper)) > 150, "the apps at work on the second batch"
        )
        chronolog.kill()
        chronolog.start()

        def at_least_brute_force() -> bool:
            last = _last_counts(clients, counts)
            return last.keys() == brute_force().keys() and all(
                last[w] >= n for w, n in brute_force().items()
            )

        wait_for(at_least_brute_force, "counts at least brute force's after the kill", timeout=120)
        expected = {k: v.upper() for k, v in lines.items()}
        wait_for(
            lambda: dict(_read_all(clients, upper)) == expected,
            "every line upper-cased after the kill",
            timeout=120,
        )
        output = _read_all(clients, upper)
        # At least once: every line is there, and a repeat is a repeat of a line, never new data.
        assert {k for k, _ in output} == set(expected) and len(output) >= len(expected)
        assert all(expected[k] == v for k, v in output)
        for name in ("wc", "up"):
            wait_for(
                lambda name=name: clients.call("streams_state", name=name)["state"] == "RUNNING",
                f"Streams app {name} running again",
                timeout=60,
            )
    finally:
        clients.call("close", name="wc")
        clients.call("close", name="up")
