"""``chronolog users``: list, add and delete SCRAM users in the broker's credential file.

    chronolog users [--config server.properties] [--override k=v ...] [--log-dir DIR] list
    chronolog users ... add NAME [--mechanism SCRAM-SHA-256] [--iterations 4096] [--password-stdin]
    chronolog users ... delete NAME [--mechanism SCRAM-SHA-512]

The file is the first log dir's ``chronolog-scram-credentials.json`` (from ``--log-dir``, or the
broker configuration's ``log.dirs``). It works whether the broker runs or not: changes are made
under the file's lock and a running broker uses them at the next authentication. The password
is read from a prompt (twice) or, with ``--password-stdin``, from the first line of standard
input; never from the command line, where other users of the machine could see it. Without
``--mechanism``, add and delete act on both SCRAM-SHA-256 and SCRAM-SHA-512.

Exit status: 0 done, 1 refused (unknown user, unreadable file), 2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from broker.config import ConfigError, load_config
from broker.security.credentials import CredentialStore, Deletion
from broker.security.files import StateFileError
from broker.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from protocol.errors import ErrorCode


def add_location_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="the broker's server.properties")
    parser.add_argument(
        "--override", metavar="KEY=VALUE", action="append", default=[], help="broker property"
    )
    parser.add_argument("--log-dir", metavar="DIR", help="the broker's first log dir")


def log_dir(args: argparse.Namespace) -> str:
    """The first log dir, from --log-dir or the configuration; ConfigError/OSError."""
    if args.log_dir:
        return str(args.log_dir)
    return load_config(args.config, args.override).log_dirs[0]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chronolog users", description=__doc__.split("\n")[0])
    add_location_arguments(parser)
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="the users and their mechanisms")
    add = sub.add_parser("add", help="add a user or change its password")
    add.add_argument("name")
    add.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS))
    add.add_argument("--iterations", type=int, default=MIN_ITERATIONS)
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    delete = sub.add_parser("delete", help="delete a user's credentials")
    delete.add_argument("name")
    delete.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        directory = log_dir(args)
        if args.action == "add":  # before the broker's first start the dir may not exist yet
            os.makedirs(directory, exist_ok=True)
        store = CredentialStore(directory)
    except (ConfigError, OSError) as exc:
        print(f"chronolog users: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "list":
            return _list(store)
        if args.action == "add":
            return _add(store, args)
        return _delete(store, args)
    except (StateFileError, OSError) as exc:
        print(f"chronolog users: {exc}", file=sys.stderr)
        return 1


def _list(store: CredentialStore) -> int:
    users = store.users()
    if not users:
        print(f"no SCRAM users in {store.path}")
    for name, credentials in sorted(users.items()):
        mechanisms = ", ".join(
            f"{m} ({c.iterations} iterations)" for m, c in sorted(credentials.items())
        )
        print(f"{name}\t{mechanisms}")
    return 0


def _password(args: argparse.Namespace) -> str | None:
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"password for {args.name}: ")
    if getpass.getpass("again: ") != first:
        print("chronolog users: the passwords differ", file=sys.stderr)
        return None
    return first


def _add(store: CredentialStore, args: argparse.Namespace) -> int:
    if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
        print(
            f"chronolog users: --iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}",
            file=sys.stderr,
        )
        return 2
    password = _password(args)
    if password is None:
        return 2
    if not password:
        print("chronolog users: the password is empty", file=sys.stderr)
        return 2
    for name in args.mechanism or sorted(MECHANISMS):
        result = store.set_password(args.name, MECHANISMS[name], password, args.iterations)
        if result.error != ErrorCode.NONE:
            print(f"chronolog users: {name}: {result.message}", file=sys.stderr)
            return 1
        print(f"{args.name}: {name} set ({args.iterations} iterations) in {store.path}")
    return 0


def _delete(store: CredentialStore, args: argparse.Namespace) -> int:
    existing = store.users().get(args.name, {})
    names = args.mechanism or sorted(existing)
    if not names or any(n not in existing for n in names):
        print(f"chronolog users: {args.name} has no such SCRAM credential", file=sys.stderr)
        return 1
    [result] = store.alter([Deletion(args.name, MECHANISMS[n].type_id) for n in names], [])
    if result.error != ErrorCode.NONE:
        print(f"chronolog users: {result.message}", file=sys.stderr)
        return 1
    print(f"{args.name}: {', '.join(names)} deleted from {store.path}")
    return 0
