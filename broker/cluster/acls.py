"""ACL bindings in a cluster, kept in ZooKeeper as Kafka's ZooKeeper authorizer kept them
(kafka.security.authorizer.AclAuthorizer and ZkData.scala, Kafka 2.0-3.9), so a CreateAcls sent to
one broker is enforced by all, and Kafka's tools reading ZooKeeper see the same bindings.

Layout (resource types in Pascal case, as SecurityUtils.resourceTypeName writes them):

- ``/kafka-acl/<Type>/<name>``: a LITERAL resource's bindings, and
  ``/kafka-acl-extended/prefixed/<Type>/<name>`` a PREFIXED one's, both
  ``{"version":1,"acls":[{"principal":"User:x","permissionType":"Allow","operation":"Read",
  "host":"*"}]}``. A resource left without bindings loses its node.
- ``/kafka-acl-changes/acl_changes_<seq>`` (persistent sequential), ``TOPIC:name`` (Kafka's
  LiteralAclChangeStore writes the ResourceType enum's name; it reads any case), after a literal
  resource changed; ``/kafka-acl-extended-changes/acl_changes_<seq>``,
  ``{"version":1,"resourceType":"TOPIC","name":..,"patternType":"PREFIXED"}``, after a prefixed
  one changed.

A change reads the resource's node, computes its new bindings and writes them conditionally on
the version read (created when absent, deleted when left empty); when another broker wrote first
it reads again and retries, ten times at most (AclAuthorizer.updateResourceAcls), then announces
the resource with a change node. Every broker loads every resource before it serves and watches
both change paths: for the notifications newer than the last it handled it reads each named
resource again (ZooKeeper's latest bindings win, whatever order the notifications come in), and
deletes notifications older than 15 minutes (ZkNodeChangeNotificationListener). Changes and
notification reads hold one lock, so a change this broker makes is never undone by an older
read of the same resource (the discipline broker/cluster/config_changes.py follows).

As in Kafka's ZooKeeper mode, a resource name containing ``/`` is refused (it would be a znode
path); Kafka 4.1's KRaft authorizer takes it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any

import structlog
import trio
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError

from broker.cluster.zk import WatchFollower, ZkDataError, ZooKeeper, notification_sequence
from broker.config import BrokerConfig
from broker.errors import ClusterStateError
from broker.security.acls import (
    AclBinding,
    AclFilter,
    AclStore,
    AclStoreError,
    InvalidAclError,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

logger = structlog.get_logger(__name__)

ROOTS = {PatternType.LITERAL: "/kafka-acl", PatternType.PREFIXED: "/kafka-acl-extended/prefixed"}
CHANGES = {
    PatternType.LITERAL: "/kafka-acl-changes",
    PatternType.PREFIXED: "/kafka-acl-extended-changes",
}
CHANGE_PREFIX = "acl_changes_"
MAX_UPDATE_RETRIES = 10
RETRY_BACKOFF_S = 0.1

Resource = tuple[ResourceType, PatternType, str]


def pascal(name: str) -> str:
    """Kafka's SecurityUtils.toPascalCase: ``TRANSACTIONAL_ID`` -> ``TransactionalId``."""
    return "".join(part.capitalize() for part in name.split("_"))


def _by_name(kind: Any) -> dict[str, Any]:
    """An enum's members by Pascal-case name and by that name upper-cased (SecurityUtils'
    maps), and by the member's own name (ResourceType.fromString)."""
    names: dict[str, Any] = {}
    for member in kind:
        names[pascal(member.name)] = member
        names[pascal(member.name).upper()] = member
        names[member.name] = member
    return names


_RESOURCE_TYPES = _by_name(ResourceType)
_OPERATIONS = _by_name(Operation)
_PERMISSIONS = _by_name(Permission)


def resource_of(binding: AclBinding) -> Resource:
    return (binding.resource_type, binding.pattern_type, binding.resource_name)


def resource_path(resource: Resource) -> str:
    resource_type, pattern_type, name = resource
    return f"{ROOTS[pattern_type]}/{pascal(resource_type.name)}/{name}"


def acls_json(bindings: Iterable[AclBinding]) -> bytes:
    """One resource's bindings as Kafka's ResourceZNode.encode writes them."""
    acls = [
        {
            "principal": b.principal,
            "permissionType": pascal(b.permission.name),
            "operation": pascal(b.operation.name),
            "host": b.host,
        }
        for b in sorted(bindings)
    ]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def parse_acls(resource: Resource, data: bytes) -> frozenset[AclBinding]:
    """The bindings of a resource node (Kafka's AclEntry.fromBytes); ZkDataError when it is
    not one."""
    path = resource_path(resource)
    if not data:
        return frozenset()
    try:
        doc = json.loads(data)
        if doc["version"] != 1:
            raise ValueError(f"version {doc['version']} is not 1")
        return frozenset(
            AclBinding(
                resource[0],
                resource[2],
                resource[1],
                str(entry["principal"]),
                str(entry["host"]),
                _OPERATIONS[entry["operation"]],
                _PERMISSIONS[entry["permissionType"]],
            )
            for entry in doc["acls"]
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ZkDataError(f"{path} is not an ACL node ({exc!r}): {data[:200]!r}") from None


def change_json(resource: Resource) -> bytes:
    """The change notification of a resource (LiteralAclChangeStore / ExtendedAclChangeStore)."""
    resource_type, pattern_type, name = resource
    if pattern_type == PatternType.LITERAL:
        return f"{resource_type.name}:{name}".encode()
    doc = {
        "version": 1,
        "resourceType": resource_type.name,
        "name": name,
        "patternType": pattern_type.name,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_change(pattern: PatternType, path: str, data: bytes) -> Resource:
    """The resource a change notification names; ZkDataError when it names none."""
    try:
        if pattern == PatternType.LITERAL:
            type_name, sep, name = data.decode().partition(":")
            if not sep:
                raise ValueError("not ResourceType:ResourceName")
            return (_RESOURCE_TYPES[type_name.upper()], PatternType.LITERAL, name)
        doc = json.loads(data)
        if doc["version"] > 1:
            raise ValueError(f"unsupported version {doc['version']}")
        return (
            _RESOURCE_TYPES[str(doc["resourceType"]).upper()],
            PatternType[str(doc["patternType"]).upper()],
            str(doc["name"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ZkDataError(f"{path} is not an ACL change ({exc!r}): {data[:200]!r}") from None


class ZkAclStore(AclStore):
    """A cluster's ACL bindings (see the module docstring). :meth:`load` before the broker
    serves, :meth:`start` to follow the other brokers' changes; trio thread only."""

    def __init__(self, zk: ZooKeeper) -> None:
        self._zk = zk
        self._acls: dict[Resource, frozenset[AclBinding]] = {}
        self._all: frozenset[AclBinding] = frozenset()
        self._lock = trio.Lock()
        self._follower = WatchFollower(self._handle_all_new, "ACL changes")
        self._last_handled = {pattern: -1 for pattern in CHANGES}

    def bindings(self) -> frozenset[AclBinding]:
        return self._all

    def check(self, binding: AclBinding) -> AclBinding:
        binding = binding.validate()
        if "/" in binding.resource_name:
            raise InvalidAclError(
                f"resource name {binding.resource_name!r} contains '/', which a cluster's ACLs "
                "in ZooKeeper cannot hold (as Kafka's ZooKeeper authorizer)"
            )
        return binding

    # -- reads -------------------------------------------------------------------------------
    async def load(self) -> None:
        """Read every resource's bindings (at start-up, before serving). Raises
        ClusterStateError."""
        try:
            async with self._lock:
                for path in (*ROOTS.values(), *CHANGES.values()):  # AclAuthorizer.createAclPaths
                    await self._zk.call(self._zk.client.ensure_path, self._zk.path(path))
                for pattern, root in ROOTS.items():
                    for type_name in await self._zk.children(root):
                        resource_type = _RESOURCE_TYPES.get(type_name)
                        if resource_type is None:
                            logger.warning(
                                "ignoring an unknown ACL resource type", path=f"{root}/{type_name}"
                            )
                            continue
                        for name in await self._zk.children(f"{root}/{type_name}"):
                            resource = (resource_type, pattern, name)
                            bindings = (await self._read(resource))[0]
                            if bindings:
                                self._acls[resource] = bindings
                self._all = frozenset(b for group in self._acls.values() for b in group)
        except KazooException as exc:
            raise ClusterStateError(f"reading the ACLs in ZooKeeper failed ({exc!r})") from exc
        logger.info("ACLs loaded", acls=len(self._all), source="ZooKeeper")

    async def _read(self, resource: Resource) -> tuple[frozenset[AclBinding], int]:
        """The resource's bindings and its node's version (-1: no node). An unreadable node
        is logged and holds none (a change then replaces it)."""
        found = await self._zk.get_or_none(resource_path(resource))
        if found is None:
            return frozenset(), -1
        data, stat = found
        try:
            return parse_acls(resource, data), stat.version
        except ZkDataError as exc:
            logger.error(
                "ignoring an unreadable ACL node",
                error=str(exc),
                action="set the resource's ACLs again with kafka-acls.sh or chronolog acls",
            )
            return frozenset(), stat.version

    def _adopt(self, resource: Resource, bindings: frozenset[AclBinding]) -> None:
        """Make ``bindings`` the resource's here; a new ``bindings()`` object when they
        changed."""
        if self._acls.get(resource, frozenset()) == bindings:
            return
        if bindings:
            self._acls[resource] = bindings
        else:
            self._acls.pop(resource, None)
        self._all = frozenset(b for group in self._acls.values() for b in group)

    # -- changes -----------------------------------------------------------------------------
    async def create(self, bindings: Iterable[AclBinding]) -> None:
        by_resource: dict[Resource, set[AclBinding]] = {}
        for b in bindings:
            by_resource.setdefault(resource_of(b), set()).add(b)
        async with self._lock:
            for resource, new in sorted(by_resource.items()):
                await self._update(resource, lambda current: current | new)

    async def delete(self, filters: list[AclFilter]) -> list[list[AclBinding]]:
        """As AclAuthorizer.deleteAcls: the resources come from the bindings this broker
        holds; each is changed on what ZooKeeper holds."""

        def keep(b: AclBinding) -> bool:
            return not any(f.matches(b) for f in filters)

        removed: set[AclBinding] = set()
        async with self._lock:
            resources = sorted({resource_of(b) for b in self._all if not keep(b)})
            for resource in resources:
                before, after = await self._update(
                    resource, lambda current: frozenset(filter(keep, current))
                )
                removed |= before - after
        return [sorted(b for b in removed if f.matches(b)) for f in filters]

    async def _update(
        self,
        resource: Resource,
        change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]],
    ) -> tuple[frozenset[AclBinding], frozenset[AclBinding]]:
        """Change one resource's bindings in ZooKeeper (conditionally, retried as the module
        docstring says), adopt them and announce them; (before, after). Caller holds the
        lock. Raises AclStoreError."""
        path = resource_path(resource)
        try:
            for _ in range(MAX_UPDATE_RETRIES + 1):
                current, version = await self._read(resource)
                new = change(current)
                if new == current:
                    self._adopt(resource, current)
                    return current, new
                try:
                    if not new:
                        await self._zk.delete(path, version=version)
                    elif version < 0:
                        await self._zk.create(path, acls_json(new))
                    else:
                        await self._zk.set(path, acls_json(new), version=version)
                except (BadVersionError, NodeExistsError, NoNodeError):
                    await trio.sleep(RETRY_BACKOFF_S)  # another broker changed it: read again
                    continue
                self._adopt(resource, new)
                await self._zk.create(
                    f"{CHANGES[resource[1]]}/{CHANGE_PREFIX}", change_json(resource), sequence=True
                )
                logger.info("ACLs of a resource changed", path=path, acls=len(new))
                return current, new
        except KazooException as exc:
            raise AclStoreError(
                f"changing the ACLs at {path} in ZooKeeper failed ({exc!r}); check ZooKeeper "
                "is reachable, then retry"
            ) from exc
        raise AclStoreError(
            f"the ACLs at {path} changed under this broker {MAX_UPDATE_RETRIES} times in a "
            "row; retry"
        )

    # -- following the other brokers' changes ------------------------------------------------
    def start(self, nursery: trio.Nursery) -> None:
        self._follower.start(nursery)

    def wake(self) -> None:
        """Look at the change paths again (a watch fired, or a new ZooKeeper session)."""
        self._follower.wake()

    async def _handle_all_new(self) -> None:
        for pattern in CHANGES:
            await self._handle_new(pattern)

    async def _handle_new(self, pattern: PatternType) -> None:
        changes = CHANGES[pattern]
        nodes = await self._zk.children(changes, watch=self.wake)
        last = self._last_handled[pattern]
        newest = last
        resources: list[Resource] = []
        for node in nodes:
            sequence = notification_sequence(node, CHANGE_PREFIX)
            if sequence is None or sequence <= last:
                continue
            newest = max(newest, sequence)
            path = f"{changes}/{node}"
            found = await self._zk.get_or_none(path)
            if found is None:
                continue  # expired and deleted meanwhile
            try:
                resource = parse_change(pattern, path, found[0])
            except ZkDataError as exc:
                logger.warning("ignoring an ACL change notification", error=str(exc))
                continue
            if resource not in resources:
                resources.append(resource)
        async with self._lock:
            for resource in resources:
                bindings = (await self._read(resource))[0]
                if bindings != self._acls.get(resource, frozenset()):
                    logger.info(
                        "ACLs of a resource changed in the cluster",
                        path=resource_path(resource),
                        acls=len(bindings),
                    )
                self._adopt(resource, bindings)
        self._last_handled[pattern] = newest
        await self._zk.purge_notifications(changes, nodes)


@asynccontextmanager
async def cluster_acls(config: BrokerConfig) -> AsyncIterator[ZkAclStore]:
    """The cluster's ACLs, loaded, through a ZooKeeper session of its own (``chronolog acls``
    with a server.properties naming zookeeper.connect). Raises AclStoreError when ZooKeeper
    cannot be reached or read."""
    assert config.zookeeper_connect is not None
    zk = ZooKeeper(
        config.zookeeper_connect,
        session_timeout_ms=config.zookeeper_session_timeout_ms,
        connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        on_state=lambda state: None,
    )
    try:
        await zk.start()
        store = ZkAclStore(zk)
        await store.load()
    except (KazooException, KazooTimeoutError, ClusterStateError) as exc:
        await zk.stop()
        raise AclStoreError(
            f"cannot read the ACLs from ZooKeeper at {config.zookeeper_connect} ({exc!r}); "
            "check zookeeper.connect and that ZooKeeper runs"
        ) from exc
    try:
        yield store
    finally:
        await zk.stop()


__all__ = [
    "ZkAclStore",
    "cluster_acls",
    "acls_json",
    "change_json",
    "parse_acls",
    "parse_change",
    "pascal",
]
