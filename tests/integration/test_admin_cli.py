"""``chronolog topics`` and ``chronolog configs`` against a real broker: what a person sees
(output, errors naming the broker and the fix) and the exit statuses (0, 1 broker refusal or
unreachable, 2 bad usage). The commands run in-process through their main(argv), except one
run through the installed ``python -m broker`` entry point."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from broker.admin import configs_cli, topics_cli
from broker.cli import main as chronolog
from tests.conftest import REPO


def name(prefix: str = "cli") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def run(capsys, broker, *argv):
    code = chronolog([argv[0], "--bootstrap-server", broker.bootstrap, *argv[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_topics_lifecycle(broker, capsys):
    topic = name()
    code, out, _ = run(
        capsys,
        broker,
        "topics",
        "create",
        topic,
        "--partitions",
        "2",
        "--config",
        "retention.ms=60000",
        "--config",
        "cleanup.policy=[delete,compact]",
    )
    assert (code, out) == (0, f"Created topic {topic} with 2 partitions.\n")
    code, out, _ = run(capsys, broker, "topics", "list", "--exclude-internal")
    assert code == 0 and topic in out.splitlines() and "__consumer_offsets" not in out
    code, out, _ = run(capsys, broker, "topics", "describe", topic)
    head, *parts = out.splitlines()
    assert head.startswith(f"Topic: {topic}\tTopicId: ")
    assert "PartitionCount: 2\tReplicationFactor: 1\t" in head
    assert head.endswith("Configs: cleanup.policy=delete,compact,retention.ms=60000")
    assert parts == [
        f"\tTopic: {topic}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in (0, 1)
    ]
    code, out, _ = run(
        capsys,
        broker,
        "topics",
        "alter",
        topic,
        "--partitions",
        "4",
        "--config",
        "segment.ms=100000",
        "--delete-config",
        "retention.ms",
    )
    assert code == 0
    assert out.splitlines() == [
        f"Updated the configs of topic {topic}.",
        f"Topic {topic} now has 4 partitions.",
    ]
    code, out, _ = run(capsys, broker, "topics", "describe", topic)
    assert "PartitionCount: 4" in out
    assert "Configs: cleanup.policy=delete,compact,segment.ms=100000\n" in out
    code, out, _ = run(capsys, broker, "topics", "delete", topic)
    assert (code, out) == (0, f"Deleted topic {topic}.\n")
    code, out, _ = run(capsys, broker, "topics", "list")
    assert topic not in out.splitlines()


def test_topics_errors_name_the_broker_and_the_fix(broker, capsys):
    topic = name()
    assert run(capsys, broker, "topics", "create", topic)[0] == 0
    code, _, err = run(capsys, broker, "topics", "create", topic)
    assert code == 1
    assert err == (
        f"chronolog topics: broker {broker.bootstrap} refused to create topic '{topic}': "
        f"TOPIC_ALREADY_EXISTS (36): Topic '{topic}' already exists.; pick another name "
        "(or pass --if-not-exists)\n"
    )
    assert run(capsys, broker, "topics", "create", topic, "--if-not-exists")[:2] == (
        0,
        f"Topic {topic} already exists.\n",
    )
    code, _, err = run(capsys, broker, "topics", "alter", topic, "--partitions", "1")
    assert code == 1 and "INVALID_PARTITIONS (37)" in err and "only be added" in err
    code, _, err = run(capsys, broker, "topics", "create", name(), "--replication-factor", "3")
    assert code == 1 and "use --replication-factor 1" in err
    code, _, err = run(capsys, broker, "topics", "create", name(), "--config", "retention.ms=x")
    assert code == 1 and "INVALID_CONFIG (40)" in err and "retention.ms" in err
    code, _, err = run(capsys, broker, "topics", "describe", name("missing"))
    assert code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in err and "chronolog topics list" in err
    missing = name("missing")
    code, out, err = run(capsys, broker, "topics", "delete", topic, missing)
    assert code == 1 and out == f"Deleted topic {topic}.\n" and missing in err
    assert run(capsys, broker, "topics", "delete", missing, "--if-exists")[:2] == (0, "")


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "alter", "t"],
        ["topics", "create"],
        ["topics", "create", "t", "--partitions", "many"],
        ["topics", "create", "t", "--config", "novalue"],
        ["configs", "alter", "--entity-type", "topics", "--entity-name", "t"],
        ["configs", "alter", "--entity-type", "topics", "--entity-default", "--add-config", "a=1"],
        ["configs", "describe", "--entity-type", "groups"],
        ["configs", "describe", "--entity-type", "brokers", "--entity-name", "zero"],
    ],
)
def test_bad_usage_exits_2(broker, capsys, argv):
    with pytest.raises(SystemExit) as exit_info:
        chronolog([argv[0], "--bootstrap-server", broker.bootstrap, *argv[1:]])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err


def test_unreachable_broker_exits_1(capsys):
    for main in (topics_cli.main, configs_cli.main):
        args = ["--bootstrap-server", "127.0.0.1:1", "--timeout", "2"]
        extra = ["list"] if main is topics_cli.main else ["describe", "--entity-type", "brokers"]
        assert main(args + extra) == 1
        err = capsys.readouterr().err
        assert "cannot connect to broker 127.0.0.1:1" in err
        assert "is the broker running and is --bootstrap-server right?" in err


def test_configs_describe_and_alter(broker_factory, capsys):
    broker = broker_factory(log_segment_bytes=5000000)
    topic = name()
    assert run(capsys, broker, "topics", "create", topic, "--config", "retention.ms=1000")[0] == 0
    code, out, _ = run(
        capsys, broker, "configs", "describe", "--entity-type", "topics", "--entity-name", topic
    )
    assert (code, out.splitlines()) == (
        0,
        [
            f"Dynamic configs for topic {topic} are:",
            # Kafka lists no log.retention.hours default here (ConfigHelper's dropWhile)
            "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}",
        ],
    )
    code, out, _ = run(
        capsys,
        broker,
        "configs",
        "alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "log.retention.ms=7200000,log.cleanup.policy=[delete,compact]",
    )
    assert (code, out) == (0, "Completed updating default config for brokers in the cluster.\n")
    code, out, _ = run(
        capsys, broker, "configs", "describe", "--entity-type", "brokers", "--entity-default"
    )
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.cleanup.policy=delete,compact sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleanup.policy=delete,compact}",
        "  log.retention.ms=7200000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}",
    ]
    code, out, _ = run(
        capsys,
        broker,
        "configs",
        "describe",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--all",
    )
    lines = out.splitlines()
    assert lines[0] == f"All configs for topic {topic} are:"
    assert (
        "  segment.bytes=5000000 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes"
        "=5000000, DEFAULT_CONFIG:log.segment.bytes=1073741824}" in lines
    )
    assert any(line.startswith("  cleanup.policy=delete,compact ") for line in lines)
    delete_retention = (
        f"configs alter --entity-type topics --entity-name {topic} --delete-config retention.ms"
    ).split()
    code, out, _ = run(capsys, broker, *delete_retention)
    assert (code, out) == (0, f"Completed updating config for topic {topic}.\n")
    code, _, err = run(capsys, broker, *delete_retention)  # nothing left to delete
    assert code == 1 and "Invalid config(s): retention.ms" in err and broker.bootstrap in err
    code, _, err = run(
        capsys,
        broker,
        "configs",
        "alter",
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--add-config",
        "log.dirs=/elsewhere",
    )
    assert code == 1
    assert "Cannot update these configs dynamically: log.dirs" in err
    assert "restart the broker" in err and broker.bootstrap in err


def test_entry_point(broker):
    done = subprocess.run(
        [sys.executable, "-m", "broker", "topics", "--bootstrap-server", broker.bootstrap, "list"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "__consumer_offsets" in done.stdout.splitlines()
