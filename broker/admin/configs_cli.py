"""``chronolog configs``: describe and change topic configs and the broker's dynamic configs on a
running broker over the Kafka protocol, in the spirit of Kafka's kafka-configs.sh.

    chronolog configs --bootstrap-server HOST:PORT describe --entity-type topics|brokers
        [--entity-name NAME | --entity-default] [--all]
    chronolog configs --bootstrap-server HOST:PORT alter --entity-type topics|brokers
        (--entity-name NAME | --entity-default) [--add-config K=V,K2=[A,B]] [--delete-config K,K2]

``describe`` prints the configs set at that level (a topic's overrides, a broker's own dynamic
configs, or with ``--entity-default`` the cluster-wide defaults), or with ``--all`` every config
with its value, each with its synonyms as kafka-configs.sh prints them. ``alter`` sets and
removes them with IncrementalAlterConfigs; a name given to --delete-config must be set. Exit
status 0, 1 when the broker refuses (the message names the broker, the error and the fix) or
cannot be reached, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from broker.admin.configs import ConfigSource, ResourceType
from broker.admin.tool import (
    ToolError,
    add_connection_options,
    broker_error,
    key_values,
    names,
    run,
)
from client import BrokerConnection
from protocol.api import ApiKey
from protocol.schemas import Body

SET, DELETE = 0, 1
ENTITY_TYPES = {
    "topics": ResourceType.TOPIC,
    "topic": ResourceType.TOPIC,
    "brokers": ResourceType.BROKER,
    "broker": ResourceType.BROKER,
}
# The names Kafka's Java admin client (ConfigEntry.ConfigSource) prints.
SOURCE_NAMES = {
    ConfigSource.UNKNOWN: "UNKNOWN",
    ConfigSource.TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
    ConfigSource.DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    ConfigSource.STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG",
    ConfigSource.DEFAULT_CONFIG: "DEFAULT_CONFIG",
}


def _level(kind: ResourceType, name: str) -> ConfigSource:
    """The source of the configs set at a resource's own level."""
    if kind == ResourceType.TOPIC:
        return ConfigSource.TOPIC_CONFIG
    return (
        ConfigSource.DYNAMIC_BROKER_CONFIG if name else ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    )


def _what(kind: ResourceType, name: str) -> str:
    if kind == ResourceType.TOPIC:
        return f"topic {name}"
    return f"broker {name}" if name else "the cluster-wide broker defaults"


def fetch(client: BrokerConnection, kind: ResourceType, name: str, all_configs: bool) -> list[Body]:
    """The resource's configs (those set at its level unless ``all_configs``), sorted."""
    body = {
        "resources": [{"resource_type": kind, "resource_name": name, "configuration_keys": None}],
        "include_synonyms": True,
    }
    (result,) = client.call(ApiKey.DESCRIBE_CONFIGS, 4, body).results
    if result.error_code:
        raise broker_error(
            client.address,
            f"describe the configs of {_what(kind, name)}",
            result.error_code,
            result.error_message,
        )
    level = _level(kind, name)
    return sorted(
        (c for c in result.configs if all_configs or c.config_source == level),
        key=lambda c: c.name,
    )


def describe(client: BrokerConnection, kind: ResourceType, name: str, all_configs: bool) -> str:
    heading = "All" if all_configs else "Dynamic"
    if kind == ResourceType.TOPIC:
        lines = [f"{heading} configs for topic {name} are:"]
    elif name:
        lines = [f"{heading} configs for broker {name} are:"]
    else:
        lines = ["Default configs for brokers in the cluster are:"]
    for c in fetch(client, kind, name, all_configs):
        synonyms = ", ".join(
            f"{SOURCE_NAMES.get(s.source, s.source)}:{s.name}={s.value}" for s in c.synonyms
        )
        value = "null" if c.value is None else c.value
        lines.append(
            f"  {c.name}={value} sensitive={str(c.is_sensitive).lower()} synonyms={{{synonyms}}}"
        )
    return "\n".join(lines)


def alter(
    client: BrokerConnection,
    kind: ResourceType,
    name: str,
    added: list[tuple[str, str]],
    deleted: list[str],
) -> str:
    if deleted:
        present = {c.name for c in fetch(client, kind, name, all_configs=False)}
        missing = [k for k in deleted if k not in present]
        if missing:
            raise ToolError(
                f"Invalid config(s): {', '.join(missing)}: not set on {_what(kind, name)} at "
                f"broker {client.address}; `chronolog configs describe` shows what is set"
            )
    ops = [{"name": k, "config_operation": SET, "value": v} for k, v in added]
    ops += [{"name": k, "config_operation": DELETE, "value": None} for k in deleted]
    body = {
        "resources": [{"resource_type": kind, "resource_name": name, "configs": ops}],
        "validate_only": False,
    }
    (result,) = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body).responses
    if result.error_code:
        raise broker_error(
            client.address,
            f"change the configs of {_what(kind, name)}",
            result.error_code,
            result.error_message,
        )
    if kind == ResourceType.BROKER and not name:
        return "Completed updating default config for brokers in the cluster."
    return f"Completed updating config for {_what(kind, name)}."


def _brokers(client: BrokerConnection) -> list[str]:
    meta = client.call(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})
    return [str(b.node_id) for b in sorted(meta.brokers, key=lambda b: b.node_id)]


def _topics(client: BrokerConnection) -> list[str]:
    meta = client.call(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    return sorted(t.name for t in meta.topics)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chronolog configs",
        description="Describe and change topic configs and the broker's dynamic configs.",
    )
    add_connection_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for command, text in (
        ("describe", "the configs set at that level, or every config with --all"),
        ("alter", "set (--add-config) and remove (--delete-config) configs"),
    ):
        p = sub.add_parser(command, help=text)
        p.add_argument(
            "--entity-type", required=True, choices=sorted(ENTITY_TYPES), help="topics or brokers"
        )
        target = p.add_mutually_exclusive_group(required=command == "alter")
        target.add_argument("--entity-name", help="the topic's name or the broker's id")
        target.add_argument(
            "--entity-default",
            action="store_true",
            help="the cluster-wide broker defaults (brokers only)",
        )
        if command == "describe":
            p.add_argument("--all", action="store_true", help="every config, not only those set")
        else:
            p.add_argument(
                "--add-config",
                type=key_values,
                default=[],
                metavar="K=V,K2=[A,B]",
                help="configs to set; brackets hold a list value's commas",
            )
            p.add_argument(
                "--delete-config", type=names, default=[], metavar="K,K2", help="configs to remove"
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    kind = ENTITY_TYPES[args.entity_type]
    if args.entity_default and kind != ResourceType.BROKER:
        parser.error("--entity-default is only for --entity-type brokers")
    if args.command == "alter" and not args.add_config and not args.delete_config:
        parser.error("alter needs --add-config or --delete-config")
    if args.entity_name is not None and kind == ResourceType.BROKER:
        if not args.entity_name.isdigit():
            parser.error(f"--entity-name {args.entity_name!r}: a broker is named by its id")

    def command(client: BrokerConnection) -> None:
        name = "" if args.entity_default else args.entity_name
        if args.command == "alter":
            print(alter(client, kind, name, args.add_config, args.delete_config))
            return
        if name is None:
            targets = _topics(client) if kind == ResourceType.TOPIC else _brokers(client)
        else:
            targets = [name]
        print("\n".join(describe(client, kind, t, args.all) for t in targets))

    return run("configs", args, command)


if __name__ == "__main__":
    sys.exit(main())
