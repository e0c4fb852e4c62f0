"""ACL bindings (KIP-140), their validation and filters, and the ACL file.

A binding allows or denies one principal, from one host (or ``*``), one operation on the
resources a pattern names: a LITERAL name (``*`` meaning every resource of the type) or a
PREFIXED one. The codes are Kafka's (ResourceType, PatternType, AclOperation,
AclPermissionType).

Where bindings live is an :class:`AclStore`: a single broker's is :class:`AclFile`,
``chronolog-acls.json`` in the first log dir (mode 0600, written whole with fsync, see
:mod:`.files`), shared by CreateAcls/DeleteAcls and ``chronolog acls``; a running broker sees the
CLI's changes at its next decision. A cluster's is ZooKeeper, as Kafka's AclAuthorizer kept them
(broker/cluster/acls.py), so every broker enforces the same bindings.
"""

from __future__ import annotations

import abc
import enum
import os
from dataclasses import dataclass
from typing import Any, Iterable


from broker import workers
from broker.security.files import STATE_FILE_FAILURES, WatchedFile

FILE_NAME = "chronolog-acls.json"
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


O = Operation
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[Operation]] = {
    ResourceType.TOPIC: frozenset(
        {O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
         O.ALTER_CONFIGS}
    ),
    ResourceType.GROUP: frozenset({O.READ, O.DESCRIBE, O.DELETE}),
    ResourceType.CLUSTER: frozenset(
        {O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
         O.ALTER, O.DESCRIBE}
    ),
    ResourceType.TRANSACTIONAL_ID: frozenset({O.DESCRIBE, O.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({O.DESCRIBE}),
    ResourceType.USER: frozenset({O.CREATE_TOKENS, O.DESCRIBE_TOKENS}),
}  # fmt: skip
"""Kafka's AclEntry.supportedOperations: what a binding on each resource type may name
(besides ALL)."""


class InvalidAclError(ValueError):
    """Raised for a binding CreateAcls or ``chronolog acls add`` must refuse (Kafka answers
    INVALID_REQUEST); the message says which part is wrong."""


@dataclass(frozen=True, order=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def validate(self) -> AclBinding:
        """This binding, or InvalidAclError as Kafka's AclAuthorizer/AuthHelper refuse."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidAclError(f"resource type {self.resource_type.name} is not allowed")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidAclError(
                f"pattern type {self.pattern_type.name} is not allowed; use LITERAL or PREFIXED"
            )
        if not self.resource_name:
            raise InvalidAclError("resource name is empty")
        if self.resource_type == ResourceType.CLUSTER and (
            self.resource_name != CLUSTER_NAME or self.pattern_type != PatternType.LITERAL
        ):
            raise InvalidAclError(f"the cluster resource is LITERAL {CLUSTER_NAME!r}")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidAclError(f"operation {self.operation.name} is not allowed")
        if self.permission in (Permission.UNKNOWN, Permission.ANY):
            raise InvalidAclError(f"permission type {self.permission.name} is not allowed")
        kind, sep, name = self.principal.partition(":")
        if not sep or not kind or not name:
            raise InvalidAclError(f"principal {self.principal!r} is not of the form User:name")
        if not self.host:
            raise InvalidAclError("host is empty; use * for every host")
        supported = SUPPORTED_OPERATIONS[self.resource_type]
        if self.operation != Operation.ALL and self.operation not in supported:
            raise InvalidAclError(
                f"resource type {self.resource_type.name} supports the operations "
                f"{', '.join(sorted(o.name for o in supported))} and ALL, not "
                f"{self.operation.name}"
            )
        return self

    def describe(self) -> str:
        """Kafka's rendering, as kafka-acls.sh lists bindings."""
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name}) on {self.resource_type.name}:"
            f"{self.pattern_type.name}:{self.resource_name}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AclBinding:
        return cls(
            ResourceType[doc["resource_type"]],
            doc["resource_name"],
            PatternType[doc["pattern_type"]],
            doc["principal"],
            doc["host"],
            Operation[doc["operation"]],
            Permission[doc["permission"]],
        )


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls/DeleteAcls filter: ANY and None match everything. Pattern type MATCH
    matches every binding that applies to the named resource (literal equal, literal ``*``,
    and prefixes of the name)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def validate(self) -> AclFilter:
        for value, what in (
            (self.resource_type, "resource type"),
            (self.pattern_type, "pattern type"),
            (self.operation, "operation"),
            (self.permission, "permission type"),
        ):
            if value == 0:
                raise InvalidAclError(f"{what} UNKNOWN is not allowed in a filter")
        return self

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, b.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH and self.resource_name is not None:
            if not (
                (
                    b.pattern_type == PatternType.LITERAL
                    and b.resource_name in (self.resource_name, WILDCARD)
                )
                or (
                    b.pattern_type == PatternType.PREFIXED
                    and self.resource_name.startswith(b.resource_name)
                )
            ):
                return False
        else:
            if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, b.pattern_type):
                return False
            if self.resource_name is not None and self.resource_name != b.resource_name:
                return False
        return (
            self.principal in (None, b.principal)
            and self.host in (None, b.host)
            and self.operation in (Operation.ANY, b.operation)
            and self.permission in (Permission.ANY, b.permission)
        )


def _parse(doc: Any) -> frozenset[AclBinding]:
    return frozenset(AclBinding.from_json(entry) for entry in (doc or {}).get("acls", ()))


def _doc(bindings: Iterable[AclBinding]) -> dict[str, Any]:
    return {"version": 1, "acls": [b.to_json() for b in sorted(bindings)]}


class AclStoreError(Exception):
    """Raised when the store cannot read or write the bindings; the message says where and
    what to do (CreateAcls and DeleteAcls answer it as UNKNOWN_SERVER_ERROR)."""


class AclStore(abc.ABC):
    """Where the broker's bindings live; the authorizer and the ACL handlers use only this."""

    @abc.abstractmethod
    def bindings(self) -> frozenset[AclBinding]:
        """Every binding, as the store holds them now: the same object until they change (the
        authorizer keeps an index per object). May raise files.StateFileError."""

    def check(self, binding: AclBinding) -> AclBinding:
        """``binding`` validated as this store can keep it; InvalidAclError otherwise."""
        return binding.validate()

    @abc.abstractmethod
    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add (checked) bindings; ones already present stay once. Raises AclStoreError."""

    @abc.abstractmethod
    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding a filter matches; per filter, the bindings it matched. Raises
        AclStoreError."""


class AclFile(AclStore):
    """The ACL file; see the module docstring. Reads raise files.StateFileError; :meth:`add`
    and :meth:`remove` block (``chronolog acls`` calls them; the broker's :meth:`create` and
    :meth:`delete` run them in a worker thread)."""

    def __init__(self, log_dir: str) -> None:
        self.path = os.path.join(log_dir, FILE_NAME)
        self._file = WatchedFile(self.path, _parse)

    def bindings(self) -> frozenset[AclBinding]:
        result: frozenset[AclBinding] = self._file.current()
        return result

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Add (already validated) bindings; ones already present stay once. Blocking."""
        new = set(bindings)

        def change(doc: Any) -> tuple[Any, None]:
            return _doc(_parse(doc) | new), None

        self._file.update(change)

    def remove(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding a filter matches; per filter, the bindings it matched."""

        def change(doc: Any) -> tuple[Any, list[list[AclBinding]]]:
            current = _parse(doc)
            matched = [sorted(b for b in current if f.matches(b)) for f in filters]
            gone = {b for group in matched for b in group}
            return (_doc(current - gone) if gone else None), matched

        result: list[list[AclBinding]] = self._file.update(change)
        return result

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        try:
            await workers.run_sync(self.add, list(bindings))
        except STATE_FILE_FAILURES as exc:
            raise AclStoreError(self._failure(exc)) from exc

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        try:
            return await workers.run_sync(self.remove, filters)
        except STATE_FILE_FAILURES as exc:
            raise AclStoreError(self._failure(exc)) from exc

    def _failure(self, exc: Exception) -> str:
        return (
            f"cannot update the ACL file {self.path} ({exc}); check that the first log dir "
            "is writable and has space"
        )
