"""Authorization decisions with Kafka's AclAuthorizer semantics (KIP-140).

For a principal, host, operation and resource: super users may do everything; otherwise the
bindings that apply to the resource are its type's LITERAL bindings on its name or on ``*`` and
its PREFIXED bindings on a prefix of its name. A DENY binding matching the principal (or
``User:*``), the host (or ``*``) and the operation (or ALL) refuses; else an ALLOW binding
matching them allows, where READ, WRITE, DELETE and ALTER imply DESCRIBE and ALTER_CONFIGS
implies DESCRIBE_CONFIGS; else, when no binding at all applies to the resource,
``allow.everyone.if.no.acl.found`` decides; else refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from broker.security.acls import (
    SUPPORTED_OPERATIONS,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclStore,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.settings import SecuritySettings

IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.ALTER_CONFIGS}),
}
"""ALLOW bindings of these operations also allow the key (Kafka's AclAuthorizer)."""

# The bindings by (resource type, pattern type), then by resource name.
_Index = dict[tuple[ResourceType, PatternType], dict[str, list[AclBinding]]]


@dataclass
class Authorizer:
    """Decisions over the bindings of ``store`` with ``settings``' super users and
    allow.everyone.if.no.acl.found."""

    store: AclStore
    settings: SecuritySettings
    _cache: tuple[frozenset[AclBinding], _Index] = field(default=(frozenset(), {}), repr=False)

    def _by_resource(self) -> _Index:
        """Bindings indexed by (type, pattern type) and name, rebuilt when they changed."""
        bindings = self.store.bindings()
        if bindings is not self._cache[0]:
            index: _Index = {}
            for b in bindings:
                index.setdefault((b.resource_type, b.pattern_type), {}).setdefault(
                    b.resource_name, []
                ).append(b)
            self._cache = (bindings, index)
        return self._cache[1]

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings that apply to one resource."""
        index = self._by_resource()
        literal = index.get((resource_type, PatternType.LITERAL), {})
        found = [*literal.get(name, ()), *(literal.get(WILDCARD, ()) if name != WILDCARD else ())]
        for prefix, bindings in index.get((resource_type, PatternType.PREFIXED), {}).items():
            if name.startswith(prefix):
                found.extend(bindings)
        return found

    def authorize(
        self,
        principal: str,
        host: str,
        operation: Operation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.settings.super_users:
            return True
        bindings = self.applicable(resource_type, name)
        matching = [
            b
            for b in bindings
            if b.principal in (principal, WILDCARD_PRINCIPAL) and b.host in (host, WILDCARD)
        ]
        if any(
            b.permission == Permission.DENY and b.operation in (operation, Operation.ALL)
            for b in matching
        ):
            return False
        allowing = {operation, Operation.ALL} | IMPLIED_BY.get(operation, frozenset())
        if any(b.permission == Permission.ALLOW and b.operation in allowing for b in matching):
            return True
        return not bindings and self.settings.allow_everyone_if_no_acl_found

    def authorize_any(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType
    ) -> bool:
        """Whether the principal may do ``operation`` on some resource of the type (Kafka's
        authorizeByResourceType, as IDEMPOTENT_WRITE's fallback to WRITE on any topic): an
        ALLOW binding names some pattern that no matching DENY covers."""
        if principal in self.settings.super_users:
            return True

        def matches(b: AclBinding) -> bool:
            return (
                b.resource_type == resource_type
                and b.principal in (principal, WILDCARD_PRINCIPAL)
                and b.host in (host, WILDCARD)
            )

        bindings = [b for b in self.store.bindings() if b.resource_type == resource_type]
        denies = [
            b
            for b in bindings
            if matches(b)
            and b.permission == Permission.DENY
            and b.operation in (operation, Operation.ALL)
        ]
        if any(
            d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD for d in denies
        ):
            return False
        for b in bindings:
            if not (
                matches(b)
                and b.permission == Permission.ALLOW
                and b.operation in (operation, Operation.ALL)
            ):
                continue
            covered = any(
                (
                    d.pattern_type == PatternType.PREFIXED
                    and b.resource_name.startswith(d.resource_name)
                )
                or (
                    d.pattern_type == PatternType.LITERAL
                    and b.pattern_type == PatternType.LITERAL
                    and d.resource_name == b.resource_name
                )
                for d in denies
            )
            if not covered:
                return True
        return not bindings and self.settings.allow_everyone_if_no_acl_found

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The bit set of the operations allowed on a resource (Metadata's and DescribeGroups'
        authorized operations: bit n set for AclOperation code n)."""
        bits = 0
        for operation in SUPPORTED_OPERATIONS[resource_type]:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << int(operation)
        return bits
