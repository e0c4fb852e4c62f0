"""``chronolog quotas``: describe and change client quotas on a running broker (chronolog or
Kafka) with DescribeClientQuotas and AlterClientQuotas, in the spirit of kafka-configs.sh
``--entity-type users|clients``.

    chronolog quotas --bootstrap-server HOST:PORT describe
        [--user NAME | --user-default] [--client-id NAME | --client-default]
    chronolog quotas --bootstrap-server HOST:PORT alter
        (--user NAME | --user-default) and/or (--client-id NAME | --client-default)
        [--add-config producer_byte_rate=1048576,request_percentage=50] [--delete-config K,K2]

``describe`` without an entity lists every quota entity; with one, the entities matching it
(strictly: ``--user alice`` is alice's own quotas, not those of alice's client ids). The quota
configs are producer_byte_rate, consumer_byte_rate (bytes per second), request_percentage
(percent of one request-handling second per second) and controller_mutation_rate. Exit status
0, 1 when the broker refuses (the message names the broker, the error and the fix) or cannot be
reached, 2 for bad usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from broker.admin.tool import (
    ToolError,
    add_connection_options,
    broker_error,
    key_values,
    names,
    run,
)
from broker.quotas import MATCH_DEFAULT, MATCH_EXACT
from broker.quotas.manager import CLIENT_ID, USER
from client import BrokerConnection
from protocol.api import ApiKey


def _entity(args: argparse.Namespace) -> list[tuple[str, str | None]]:
    """(entity type, name) pairs the arguments name; None is the default."""
    parts: list[tuple[str, str | None]] = []
    if args.user is not None or args.user_default:
        parts.append((USER, None if args.user_default else args.user))
    if args.client_id is not None or args.client_default:
        parts.append((CLIENT_ID, None if args.client_default else args.client_id))
    return parts


def _show(parts: list[tuple[str, str | None]]) -> str:
    shown = {USER: "user", CLIENT_ID: "client-id"}
    return ", ".join(f"{shown.get(t, t)} {'<default>' if n is None else repr(n)}" for t, n in parts)


def describe(client: BrokerConnection, parts: list[tuple[str, str | None]]) -> str:
    components = [
        {
            "entity_type": t,
            "match_type": MATCH_DEFAULT if n is None else MATCH_EXACT,
            "match": n,
        }
        for t, n in parts
    ]
    body = client.call(
        ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": components, "strict": bool(parts)}
    )
    if body.error_code:
        raise broker_error(
            client.address, "describe client quotas", body.error_code, body.error_message
        )
    lines = []
    for entry in body.entries or ():
        entity = [(e.entity_type, e.entity_name) for e in entry.entity]
        values = ", ".join(f"{v.key}={_number(v.value)}" for v in entry["values"])
        lines.append(f"Quota configs for {_show(entity)} are {values}")
    return (
        "\n".join(lines)
        if lines
        else "No client quotas set" + (f" for {_show(parts)}" if parts else "")
    )


def alter(
    client: BrokerConnection,
    parts: list[tuple[str, str | None]],
    added: list[tuple[str, str]],
    deleted: list[str],
) -> str:
    ops = []
    for key, raw in added:
        try:
            value = float(raw)
        except ValueError:
            raise ToolError(f"{key}={raw}: a quota is a number") from None
        ops.append({"key": key, "value": value, "remove": False})
    ops += [{"key": key, "value": 0.0, "remove": True} for key in deleted]
    body = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in parts],
                "ops": ops,
            }
        ],
        "validate_only": False,
    }
    (result,) = client.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, body).entries
    if result.error_code:
        raise broker_error(
            client.address,
            f"change the quotas of {_show(parts)}",
            result.error_code,
            result.error_message,
        )
    return f"Completed updating quotas for {_show(parts)}."


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else str(value)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chronolog quotas", description="Describe and change client quotas."
    )
    add_connection_options(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for command, text in (
        ("describe", "the quotas set (every entity, or those matching the one named)"),
        ("alter", "set (--add-config) and remove (--delete-config) an entity's quotas"),
    ):
        p = sub.add_parser(command, help=text)
        user = p.add_mutually_exclusive_group()
        user.add_argument("--user", help="a user principal's name (User:NAME)")
        user.add_argument("--user-default", action="store_true", help="the default user")
        client = p.add_mutually_exclusive_group()
        client.add_argument("--client-id", help="a client id")
        client.add_argument("--client-default", action="store_true", help="the default client id")
        if command == "alter":
            p.add_argument(
                "--add-config",
                type=key_values,
                default=[],
                metavar="K=V,K2=V2",
                help="quotas to set, e.g. producer_byte_rate=1048576",
            )
            p.add_argument(
                "--delete-config", type=names, default=[], metavar="K,K2", help="quotas to remove"
            )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    parts = _entity(args)
    if args.command == "alter":
        if not parts:
            parser.error("alter needs --user/--user-default and/or --client-id/--client-default")
        if not args.add_config and not args.delete_config:
            parser.error("alter needs --add-config or --delete-config")

    def command(client: BrokerConnection) -> None:
        if args.command == "alter":
            print(alter(client, parts, args.add_config, args.delete_config))
        else:
            print(describe(client, parts))

    return run("quotas", args, command)
