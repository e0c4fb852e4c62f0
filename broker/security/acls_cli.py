"""``chronolog acls``: list, add and remove ACL bindings where the broker keeps them.

    chronolog acls [--config server.properties | --log-dir DIR] list [RESOURCE] [--principal P]
    chronolog acls ... add (--allow-principal P | --deny-principal P) [--host H]
                           --operation OP [--operation OP ...] RESOURCE [--prefixed]
    chronolog acls ... remove RESOURCE [--principal P] [--operation OP] [--host H]

RESOURCE is one of ``--topic NAME``, ``--group NAME``, ``--transactional-id NAME`` or
``--cluster``; ``--prefixed`` makes a PREFIXED pattern of the name (``*`` as a literal name
means every resource of the type). Operations and principals are Kafka's (``Read``,
``Describe``, ``All``; ``User:alice``, ``User:*``). Like kafka-acls.sh with
``--authorizer-properties``, this edits the ACLs directly, whether the brokers run or not: a
single broker's ACL file (under its lock; the broker applies it at its next decision), or, when
the --config file names ``zookeeper.connect``, the cluster's ACLs in ZooKeeper, written as the
brokers write them, with the change notification every broker applies at once (--log-dir always
means the file). Exit status: 0 done, 1 an invalid binding or an unreadable or unreachable
store, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from broker.cluster.acls import cluster_acls
from broker.config import ConfigError, load_config
from broker.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFile,
    AclFilter,
    AclStore,
    AclStoreError,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.files import StateFileError
from broker.security.users_cli import add_location_arguments


def _operation(text: str) -> Operation:
    name = text.replace("-", "_").upper()
    name = {"DESCRIBECONFIGS": "DESCRIBE_CONFIGS", "ALTERCONFIGS": "ALTER_CONFIGS"}.get(name, name)
    name = {"IDEMPOTENTWRITE": "IDEMPOTENT_WRITE", "CLUSTERACTION": "CLUSTER_ACTION"}.get(
        name, name
    )
    try:
        return Operation[name]
    except KeyError:
        raise argparse.ArgumentTypeError(f"unknown operation {text!r}") from None


def _resource_arguments(parser: argparse.ArgumentParser, required: bool) -> None:
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--topic")
    group.add_argument("--group")
    group.add_argument("--transactional-id")
    group.add_argument("--cluster", action="store_true")
    parser.add_argument("--prefixed", action="store_true", help="a PREFIXED pattern of the name")


def _resource(args: argparse.Namespace) -> tuple[ResourceType, str] | None:
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    for attr, kind in (
        ("topic", ResourceType.TOPIC),
        ("group", ResourceType.GROUP),
        ("transactional_id", ResourceType.TRANSACTIONAL_ID),
    ):
        if getattr(args, attr) is not None:
            return kind, getattr(args, attr)
    return None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronolog acls", description=__doc__.split("\n")[0])
    add_location_arguments(parser)
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="the bindings (of one resource)")
    _resource_arguments(listing, required=False)
    listing.add_argument("--principal")
    add = sub.add_parser("add", help="add bindings")
    who = add.add_mutually_exclusive_group(required=True)
    who.add_argument("--allow-principal")
    who.add_argument("--deny-principal")
    add.add_argument("--host", default="*")
    add.add_argument("--operation", type=_operation, action="append", required=True)
    _resource_arguments(add, required=True)
    remove = sub.add_parser("remove", help="remove the bindings that match")
    _resource_arguments(remove, required=True)
    remove.add_argument("--principal")
    remove.add_argument("--host")
    remove.add_argument("--operation", type=_operation)
    return parser


@asynccontextmanager
async def _store(args: argparse.Namespace) -> AsyncIterator[tuple[AclStore, str]]:
    """The store the arguments name and where it is (for messages). ConfigError/OSError for
    a bad --config, AclStoreError for an unreachable ZooKeeper."""
    if args.log_dir:
        file = AclFile(str(args.log_dir))
        yield file, file.path
        return
    config = load_config(args.config, args.override)
    if config.zookeeper_connect is None:
        file = AclFile(config.log_dirs[0])
        yield file, file.path
        return
    async with cluster_acls(config) as store:
        yield store, f"ZooKeeper {config.zookeeper_connect}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return trio.run(_main, args)


async def _main(args: argparse.Namespace) -> int:
    try:
        async with _store(args) as (store, where):
            return await _act(args, store, where)
    except (ConfigError, OSError) as exc:
        print(f"chronolog acls: {exc}", file=sys.stderr)
        return 2
    except (StateFileError, AclStoreError) as exc:
        print(f"chronolog acls: {exc}", file=sys.stderr)
        return 1


async def _act(args: argparse.Namespace, store: AclStore, where: str) -> int:
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    resource = _resource(args)
    if args.action == "list":
        acl_filter = AclFilter(
            resource_type=resource[0] if resource else ResourceType.ANY,
            resource_name=resource[1] if resource else None,
            pattern_type=pattern if resource else PatternType.ANY,
            principal=args.principal,
        )
        bindings = [b for b in sorted(store.bindings()) if acl_filter.matches(b)]
        for b in bindings:
            print(b.describe())
        if not bindings:
            print(f"no ACLs in {where}" + (" match" if resource else ""))
        return 0
    assert resource is not None
    if args.action == "add":
        principal = args.allow_principal or args.deny_principal
        permission = Permission.ALLOW if args.allow_principal else Permission.DENY
        try:
            bindings = [
                store.check(
                    AclBinding(
                        resource[0], resource[1], pattern, principal, args.host, op, permission
                    )
                )
                for op in args.operation
            ]
        except InvalidAclError as exc:
            print(f"chronolog acls: {exc}", file=sys.stderr)
            return 1
        await store.create(bindings)
        for b in bindings:
            print(f"added {b.describe()}")
        return 0
    [removed] = await store.delete(
        [
            AclFilter(
                resource_type=resource[0],
                resource_name=resource[1],
                pattern_type=pattern,
                principal=args.principal,
                host=args.host,
                operation=args.operation or Operation.ANY,
            )
        ]
    )
    for b in removed:
        print(f"removed {b.describe()}")
    if not removed:
        print("no ACL matched")
    return 0
