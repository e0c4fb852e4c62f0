"""The SCRAM credential store: ``chronolog-scram-credentials.json`` in the first log dir.

Kafka keeps SCRAM credentials in ZooKeeper or its metadata log; chronolog keeps them in one
private file (mode 0600, see :mod:`.files`) that the broker, AlterUserScramCredentials (KIP-554)
and ``chronolog users`` all change under a lock. Per user and mechanism it holds the salt, the
iteration count, StoredKey and ServerKey (:class:`~.scram.Credential`), base64-encoded; never a
password or a salted password.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from typing import Any, Iterable

from broker.security.files import WatchedFile
from broker.security.scram import (
    MAX_ITERATIONS,
    MECHANISMS,
    MIN_ITERATIONS,
    Credential,
    Mechanism,
)
from protocol.errors import ErrorCode

FILE_NAME = "chronolog-scram-credentials.json"

Users = dict[str, dict[str, Credential]]


def _parse(doc: Any) -> Users:
    users: Users = {}
    for user, mechanisms in (doc or {}).get("users", {}).items():
        users[user] = {
            name: Credential(
                salt=base64.b64decode(c["salt"]),
                stored_key=base64.b64decode(c["stored_key"]),
                server_key=base64.b64decode(c["server_key"]),
                iterations=int(c["iterations"]),
            )
            for name, c in mechanisms.items()
        }
    return users


def _doc(users: Users) -> dict[str, Any]:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "version": 1,
        "users": {
            user: {
                name: {
                    "salt": b64(c.salt),
                    "stored_key": b64(c.stored_key),
                    "server_key": b64(c.server_key),
                    "iterations": c.iterations,
                }
                for name, c in sorted(mechanisms.items())
            }
            for user, mechanisms in sorted(users.items())
            if mechanisms
        },
    }


@dataclass(frozen=True)
class Upsertion:
    """Set a user's credential: from AlterUserScramCredentials (salt and salted password as
    the client computed them) or from a password (``chronolog users add``)."""

    user: str
    mechanism: int  # Kafka's ScramMechanism type id: 1 SHA-256, 2 SHA-512
    iterations: int
    salt: bytes = b""
    salted_password: bytes = b""


@dataclass(frozen=True)
class Deletion:
    user: str
    mechanism: int


@dataclass(frozen=True)
class AlterResult:
    user: str
    error: ErrorCode
    message: str | None = None


class CredentialStore:
    """Look-ups for authentication, and the changes of KIP-554 (see the module docstring)."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, FILE_NAME)
        self._file = WatchedFile(self.path, _parse)

    def users(self) -> Users:
        """Every user's credentials, reloaded if the file changed; StateFileError."""
        users: Users = self._file.current()
        return users

    def lookup(self, user: str, mechanism: Mechanism) -> Credential | None:
        return self.users().get(user, {}).get(mechanism.name)

    def alter(
        self, deletions: Iterable[Deletion], upsertions: Iterable[Upsertion]
    ) -> list[AlterResult]:
        """Apply KIP-554's changes, one result per user named (in order of first mention).
        Errors as Kafka's: a user named twice DUPLICATE_RESOURCE, an unknown mechanism
        UNSUPPORTED_SASL_MECHANISM, an empty user name, iterations outside 4096..16384 or an
        empty salt or salted password UNACCEPTABLE_CREDENTIAL, deleting a credential that does
        not exist RESOURCE_NOT_FOUND. Blocking (file write)."""

        items: list[Deletion | Upsertion] = [*deletions, *upsertions]
        counts: dict[tuple[str, int], int] = {}
        for item in items:
            counts[(item.user, item.mechanism)] = counts.get((item.user, item.mechanism), 0) + 1

        def change(doc: Any) -> tuple[Any, list[AlterResult]]:
            users = _parse(doc)
            results: dict[str, AlterResult] = {}
            for item in items:  # a user's result is its first failing change, else NONE
                if results.get(item.user, _OK).error == ErrorCode.NONE:
                    results[item.user] = _check(item, counts, users)
            for item in items:
                mechanism = _mechanism(item.mechanism)
                if results[item.user].error != ErrorCode.NONE or mechanism is None:
                    continue
                if isinstance(item, Deletion):
                    users.get(item.user, {}).pop(mechanism.name, None)
                else:
                    users.setdefault(item.user, {})[mechanism.name] = (
                        Credential.from_salted_password(
                            mechanism, item.salted_password, item.salt, item.iterations
                        )
                    )
            changed = any(r.error == ErrorCode.NONE for r in results.values())
            return (_doc(users) if changed else None), list(results.values())

        result: list[AlterResult] = self._file.update(change)
        return result

    def set_password(
        self, user: str, mechanism: Mechanism, password: str, iterations: int = MIN_ITERATIONS
    ) -> AlterResult:
        """``chronolog users add``: a fresh salt, the password iterated and salted."""
        credential = Credential.from_password(mechanism, password, iterations)
        # Upsertion takes the salted password; recompute it here from the fresh salt.
        salted = mechanism.salted_password(password, credential.salt, iterations)
        return self.alter(
            [], [Upsertion(user, mechanism.type_id, iterations, credential.salt, salted)]
        )[0]


_OK = AlterResult("", ErrorCode.NONE)


def _mechanism(type_id: int) -> Mechanism | None:
    return next((m for m in MECHANISMS.values() if m.type_id == type_id), None)


def _check(
    item: Deletion | Upsertion, counts: dict[tuple[str, int], int], users: Users
) -> AlterResult:
    """The error for one change, as Kafka's ControllerApis/ScramControlManager decide it."""
    user = item.user
    if not user:
        return AlterResult(user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    if counts[(user, item.mechanism)] > 1:
        return AlterResult(
            user,
            ErrorCode.DUPLICATE_RESOURCE,
            "A user credential cannot be altered twice in the same request",
        )
    mechanism = _mechanism(item.mechanism)
    if mechanism is None:
        return AlterResult(user, ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    if isinstance(item, Deletion):
        if mechanism.name not in users.get(user, {}):
            return AlterResult(
                user,
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist",
            )
        return AlterResult(user, ErrorCode.NONE)
    if not MIN_ITERATIONS <= item.iterations <= MAX_ITERATIONS:
        return AlterResult(
            user,
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}",
        )
    if not item.salt or not item.salted_password:
        return AlterResult(
            user, ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
        )
    return AlterResult(user, ErrorCode.NONE)
