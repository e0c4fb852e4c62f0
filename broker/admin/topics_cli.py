"""``chronolog topics``: list, describe, create, alter and delete topics on a running broker over
the Kafka protocol, in the spirit of Kafka's kafka-topics.sh.

    chronolog topics --bootstrap-server HOST:PORT list [--exclude-internal]
    chronolog topics --bootstrap-server HOST:PORT describe [TOPIC ...] [--exclude-internal]
    chronolog topics --bootstrap-server HOST:PORT create TOPIC [--partitions N]
        [--replication-factor 1] [--config KEY=VALUE ...] [--if-not-exists]
    chronolog topics --bootstrap-server HOST:PORT alter TOPIC [--partitions N]
        [--config KEY=VALUE ...] [--delete-config KEY ...]
    chronolog topics --bootstrap-server HOST:PORT delete TOPIC [TOPIC ...] [--if-exists]

Exit status 0, 1 when the broker refuses (the message names the broker, the error and the fix)
or cannot be reached, 2 for bad usage. Requests: Metadata v12, DescribeConfigs v4, CreateTopics
v7, CreatePartitions v3, IncrementalAlterConfigs v1, DeleteTopics v6.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Sequence

from broker.admin.configs import ConfigSource, ResourceType
from broker.admin.tool import add_connection_options, broker_error, key_values, run
from broker.topics import topic_id_string
from client import BrokerConnection
from protocol.api import ApiKey
from protocol.errors import ErrorCode
from protocol.schemas import Body

SET, DELETE = 0, 1
ZERO_UUID = uuid.UUID(int=0)


def _metadata(client: BrokerConnection, topics: list[str] | None) -> list[Body]:
    wanted = None if topics is None else [{"name": t} for t in topics]
    body = {"topics": wanted, "allow_auto_topic_creation": False}
    topics_found: list[Body] = client.call(ApiKey.METADATA, 12, body).topics
    return topics_found


def list_topics(client: BrokerConnection, exclude_internal: bool) -> list[str]:
    return sorted(
        t.name for t in _metadata(client, None) if not (exclude_internal and t.is_internal)
    )


def _overrides(client: BrokerConnection, topic: str) -> list[tuple[str, str]]:
    body = {
        "resources": [
            {
                "resource_type": ResourceType.TOPIC,
                "resource_name": topic,
                "configuration_keys": None,
            }
        ],
        "include_synonyms": False,
    }
    (result,) = client.call(ApiKey.DESCRIBE_CONFIGS, 4, body).results
    if result.error_code:
        raise broker_error(
            client.address,
            f"describe the configs of topic {topic!r}",
            result.error_code,
            result.error_message,
        )
    return [
        (c.name, c.value) for c in result.configs if c.config_source == ConfigSource.TOPIC_CONFIG
    ]


def describe(client: BrokerConnection, topics: list[str], exclude_internal: bool) -> str:
    found = _metadata(client, topics or None)
    lines = []
    for t in sorted(found, key=lambda t: t.name):
        if t.error_code:
            raise broker_error(client.address, f"describe topic {t.name!r}", t.error_code)
        if exclude_internal and t.is_internal:
            continue
        configs = ",".join(f"{k}={v}" for k, v in _overrides(client, t.name))
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        factor = len(parts[0].replica_nodes) if parts else 0
        lines.append(
            f"Topic: {t.name}\tTopicId: {topic_id_string(t.topic_id)}\t"
            f"PartitionCount: {len(parts)}\tReplicationFactor: {factor}\tConfigs: {configs}"
        )
        for p in parts:
            leader = p.leader_id if p.leader_id >= 0 else "none"
            lines.append(
                f"\tTopic: {t.name}\tPartition: {p.partition_index}\tLeader: {leader}\t"
                f"Replicas: {','.join(map(str, p.replica_nodes))}\t"
                f"Isr: {','.join(map(str, p.isr_nodes))}"
                + (
                    f"\tOffline: {','.join(map(str, p.offline_replicas))}"
                    if p.offline_replicas
                    else ""
                )
            )
    return "\n".join(lines)


def create(
    client: BrokerConnection,
    topic: str,
    partitions: int,
    factor: int,
    configs: list[tuple[str, str]],
    if_not_exists: bool,
) -> str:
    body = {
        "topics": [
            {
                "name": topic,
                "num_partitions": partitions,
                "replication_factor": factor,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in configs],
            }
        ],
        "timeout_ms": 30000,
        "validate_only": False,
    }
    (result,) = client.call(ApiKey.CREATE_TOPICS, 7, body).topics
    if result.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
        return f"Topic {topic} already exists."
    if result.error_code:
        raise broker_error(
            client.address, f"create topic {topic!r}", result.error_code, result.error_message
        )
    return f"Created topic {topic} with {result.num_partitions} partitions."


def alter(
    client: BrokerConnection,
    topic: str,
    partitions: int | None,
    configs: list[tuple[str, str]],
    deleted: list[str],
) -> list[str]:
    out = []
    if configs or deleted:
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in configs]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in deleted]
        body = {
            "resources": [
                {"resource_type": ResourceType.TOPIC, "resource_name": topic, "configs": ops}
            ],
            "validate_only": False,
        }
        (result,) = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
        if result.error_code:
            raise broker_error(
                client.address,
                f"change the configs of topic {topic!r}",
                result.error_code,
                result.error_message,
            )
        out.append(f"Updated the configs of topic {topic}.")
    if partitions is not None:
        body = {
            "topics": [{"name": topic, "count": partitions, "assignments": None}],
            "timeout_ms": 30000,
            "validate_only": False,
        }
        (result,) = client.call(ApiKey.CREATE_PARTITIONS, 3, body).results
        if result.error_code:
            raise broker_error(
                client.address,
                f"add partitions to topic {topic!r}",
                result.error_code,
                result.error_message,
            )
        out.append(f"Topic {topic} now has {partitions} partitions.")
    return out


def delete(client: BrokerConnection, topics: list[str], if_exists: bool) -> None:
    """Print each topic deleted; raise ToolError for the first one refused (after printing the
    ones that went)."""
    body = {
        "topics": [{"name": t, "topic_id": ZERO_UUID} for t in topics],
        "timeout_ms": 30000,
    }
    refused = None
    for result in client.call(ApiKey.DELETE_TOPICS, 6, body).responses:
        if result.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and if_exists:
            continue
        if result.error_code:
            refused = refused or broker_error(
                client.address,
                f"delete topic {result.name!r}",
                result.error_code,
                result.error_message,
            )
        else:
            print(f"Deleted topic {result.name}.")
    if refused is not None:
        raise refused


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chronolog topics",
        description="List, describe, create, alter and delete topics on a running broker.",
    )
    add_connection_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="topic names, one a line")
    listing.add_argument("--exclude-internal", action="store_true", help="leave out __* topics")
    desc = sub.add_parser("describe", help="partitions, leaders and config overrides")
    desc.add_argument("topics", nargs="*", metavar="TOPIC", help="default: every topic")
    desc.add_argument("--exclude-internal", action="store_true", help="leave out __* topics")
    new = sub.add_parser("create", help="create a topic")
    new.add_argument("topic", metavar="TOPIC")
    new.add_argument("--partitions", type=int, default=-1, help="default: num.partitions")
    new.add_argument("--replication-factor", type=int, default=-1, help="1 (one broker)")
    new.add_argument(
        "--config",
        action="append",
        default=[],
        type=key_values,
        metavar="KEY=VALUE",
        help="a topic config override (repeatable)",
    )
    new.add_argument("--if-not-exists", action="store_true", help="an existing topic is fine")
    change = sub.add_parser("alter", help="add partitions, set or remove config overrides")
    change.add_argument("topic", metavar="TOPIC")
    change.add_argument("--partitions", type=int, help="the new partition count (only grows)")
    change.add_argument(
        "--config",
        action="append",
        default=[],
        type=key_values,
        metavar="KEY=VALUE",
        help="set a topic config override (repeatable)",
    )
    change.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="remove a topic config override (repeatable)",
    )
    gone = sub.add_parser("delete", help="delete topics and their data")
    gone.add_argument("topics", nargs="+", metavar="TOPIC")
    gone.add_argument("--if-exists", action="store_true", help="a missing topic is fine")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    configs = [pair for group in getattr(args, "config", []) for pair in group]
    if (
        args.command == "alter"
        and args.partitions is None
        and not configs
        and not args.delete_config
    ):
        parser.error("alter needs --partitions, --config or --delete-config")

    def command(client: BrokerConnection) -> None:
        if args.command == "list":
            for name in list_topics(client, args.exclude_internal):
                print(name)
        elif args.command == "describe":
            text = describe(client, args.topics, args.exclude_internal)
            if text:
                print(text)
        elif args.command == "create":
            print(
                create(
                    client,
                    args.topic,
                    args.partitions,
                    args.replication_factor,
                    configs,
                    args.if_not_exists,
                )
            )
        elif args.command == "alter":
            for line in alter(client, args.topic, args.partitions, configs, args.delete_config):
                print(line)
        else:
            delete(client, args.topics, args.if_exists)

    return run("topics", args, command)


if __name__ == "__main__":
    sys.exit(main())
