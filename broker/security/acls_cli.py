"""``chronolog acls``: list, add and remove ACL bindings in the broker's ACL file.

    chronolog acls [--config server.properties | --log-dir DIR] list [RESOURCE] [--principal P]
    chronolog acls ... add (--allow-principal P | --deny-principal P) [--host H]
                           --operation OP [--operation OP ...] RESOURCE [--prefixed]
    chronolog acls ... remove RESOURCE [--principal P] [--operation OP] [--host H]

RESOURCE is one of ``--topic NAME``, ``--group NAME``, ``--transactional-id NAME`` or
``--cluster``; ``--prefixed`` makes a PREFIXED pattern of the name (``*`` as a literal name
means every resource of the type). Operations and principals are Kafka's (``Read``,
``Describe``, ``All``; ``User:alice``, ``User:*``). Like kafka-acls.sh with
``--authorizer-properties``, this edits the ACLs directly (the file under its lock), whether
the broker runs or not; a running broker applies them at its next decision. Exit status: 0
done, 1 an invalid binding or an unreadable file, 2 bad usage.
"""

from __future__ import annotations

import argparse
import sys

from broker.config import ConfigError
from broker.security.acls import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclStore,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.files import StateFileError
from broker.security.users_cli import add_location_arguments, log_dir


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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        store = AclStore(log_dir(args))
    except (ConfigError, OSError) as exc:
        print(f"chronolog acls: {exc}", file=sys.stderr)
        return 2
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    resource = _resource(args)
    try:
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
                print(f"no ACLs in {store.path}" + (" match" if resource else ""))
            return 0
        assert resource is not None
        if args.action == "add":
            principal = args.allow_principal or args.deny_principal
            permission = Permission.ALLOW if args.allow_principal else Permission.DENY
            try:
                bindings = [
                    AclBinding(
                        resource[0], resource[1], pattern, principal, args.host, op, permission
                    ).validate()
                    for op in args.operation
                ]
            except InvalidAclError as exc:
                print(f"chronolog acls: {exc}", file=sys.stderr)
                return 1
            store.add(bindings)
            for b in bindings:
                print(f"added {b.describe()}")
            return 0
        [removed] = store.remove(
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
    except (StateFileError, OSError) as exc:
        print(f"chronolog acls: {exc}", file=sys.stderr)
        return 1
