"""Client quotas (KIP-13, KIP-124, KIP-219, KIP-546): the broker's quota configs, their
storage, DescribeClientQuotas / AlterClientQuotas, and the throttle each answer carries.

- :mod:`.rate`: Kafka's windowed rate; :mod:`.manager`: one quota type's limits, precedence
  and rates; :mod:`.store`: the quota file (single broker) or ZooKeeper's /config/users and
  /config/clients (cluster); :mod:`.throttle`: what a request costs and the server's hook;
  :mod:`.metrics`: the Prometheus families; :mod:`.cli`: ``chronolog quotas``.
- :class:`ClientQuotas` (``ctx.quotas``) holds every entity's configs and the three managers
  (produce and fetch byte rates, request percentage). Trio thread only; alterations take its
  lock, so the file or the znodes are written one change at a time. ``controller_mutation_rate``
  is stored and described but not enforced (chronolog has no controller mutation quota), and
  IP entities (connection-creation rates) are refused.
"""

from __future__ import annotations

import math
from decimal import Decimal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog
import trio

from broker import workers
from broker.quotas.manager import (
    CLIENT_ID,
    DEFAULT,
    IP,
    QUOTA_CONFIG_TYPES,
    USER,
    ClientQuotaManager,
    Entity,
    QuotaKind,
    desanitize,
    entity_path,
    parse_entity_path,
    sanitize,
)
from broker.quotas.store import FileQuotaStore, ZkQuotaStore
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from broker.config import BrokerConfig

logger = structlog.get_logger(__name__)

__all__ = ["ClientQuotas", "QuotaRequestError", "MATCH_EXACT", "MATCH_DEFAULT", "MATCH_SPECIFIED"]

# DescribeClientQuotas' match types (ClientQuotaFilterComponent)
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class QuotaRequestError(Exception):
    """Raised by :meth:`ClientQuotas.describe` and :meth:`ClientQuotas.check_alteration` for a
    request Kafka refuses: ``code`` is the error to answer, the message Kafka's text."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Op:
    """One AlterClientQuotas operation: set ``key`` to ``value``, or with ``remove`` drop it."""

    key: str
    value: float
    remove: bool


class ClientQuotas:
    """Every quota entity's configs and the managers enforcing them; see the module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        samples, window_s = config.quota_window_num, config.quota_window_size_seconds
        self.managers = {kind: ClientQuotaManager(kind, samples, window_s) for kind in QuotaKind}
        self.produce = self.managers[QuotaKind.PRODUCE]
        self.fetch = self.managers[QuotaKind.FETCH]
        self.request = self.managers[QuotaKind.REQUEST]
        self.entities: dict[Entity, dict[str, str]] = {}
        self.file_store: FileQuotaStore | None = FileQuotaStore(config.log_dirs[0])
        self.zk_store: ZkQuotaStore | None = None
        self.lock = trio.Lock()
        # Whether any quota was set since the start: the request path skips quotas until then
        # (one attribute read per request).
        self.enabled = False

    # -- loading and following changes ---------------------------------------------------------
    def load_file(self) -> None:
        """A single broker's quotas from its file (worker thread; StartupError if unreadable)."""
        assert self.file_store is not None
        for entity, config in self.file_store.load().items():
            self.adopt(entity, config, quiet=True)
        if self.entities:
            logger.info(
                "client quotas loaded", entities=len(self.entities), source=self.file_store.path
            )

    async def use_zookeeper(self, store: ZkQuotaStore) -> None:
        """Keep the quotas in ZooKeeper from now on and load them from there."""
        self.file_store = None
        self.zk_store = store
        for entity, config in (await store.load()).items():
            self.adopt(entity, config, quiet=True)
        if self.entities:
            logger.info("client quotas loaded", entities=len(self.entities), source="ZooKeeper")

    async def reload(self, path: str) -> None:
        """Read one entity again after a change notification for ``users/...`` or ``clients/...``
        (broker/cluster/config_changes.py)."""
        entity = parse_entity_path(path)
        if entity is None or self.zk_store is None:
            logger.info("config change ignored: not a user or client-id entity", entity=path)
            return
        self.adopt(entity, await self.zk_store.read(path))

    def adopt(self, entity: Entity, config: Mapping[str, str], *, quiet: bool = False) -> None:
        """Make ``config`` the entity's whole config and apply its quotas."""
        kept = dict(config)
        before = self.entities.get(entity, {})
        if kept:
            self.entities[entity] = kept
        else:
            self.entities.pop(entity, None)
        for kind, manager in self.managers.items():
            raw = kept.get(kind.config_key)
            bound = _number(entity, kind.config_key, raw)
            if bound is None and before.get(kind.config_key) is None:
                continue
            manager.update(entity, bound)
            self.enabled = self.enabled or manager.enabled
        changed = {k: kept.get(k) for k in QUOTA_CONFIG_TYPES if kept.get(k) != before.get(k)}
        if changed and not quiet:
            logger.info("client quotas changed", entity=entity_path(entity), quotas=changed)

    # -- DescribeClientQuotas ------------------------------------------------------------------
    def describe(
        self, components: Iterable[tuple[str, int, str | None]], strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities matching the filter, each with its quota values, as ZkAdminManager's
        describeClientQuotas answers; ``components``: (entity type, match type, match). Raises
        QuotaRequestError."""
        wanted: dict[str, tuple[int, str | None]] = {}
        for entity_type, match_type, match in components:
            if entity_type in wanted:
                short = {USER: "user", CLIENT_ID: "client", IP: "ip"}.get(entity_type, entity_type)
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"Duplicate {short} filter component entity type"
                )
            if entity_type == "":
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, "Unexpected empty filter component entity type"
                )
            if entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaRequestError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"Custom entity type '{entity_type}' not supported",
                )
            if match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"Unexpected match type: {match_type}"
                )
            if match_type == MATCH_EXACT and match is None:
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, "Exact match requires a name to match"
                )
            wanted[entity_type] = (match_type, match)
        if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST,
                "Invalid entity filter component combination, IP filter component should not "
                "be used with user or clientId filter component.",
            )
        if IP in wanted:
            return []  # chronolog keeps no IP quotas

        def matches(entity_type: str, name: str | None) -> bool:
            component = wanted.get(entity_type)
            if component is None:
                return name is None or not strict
            match_type, match = component
            if match_type == MATCH_SPECIFIED:
                return name is not None
            target = DEFAULT if match_type == MATCH_DEFAULT else sanitize(match or "")
            return name == target

        result = []
        for entity, config in sorted(self.entities.items(), key=lambda i: entity_path(i[0])):
            values = {
                k: float(v) for k, v in config.items() if k in QUOTA_CONFIG_TYPES and _is_number(v)
            }
            if values and matches(USER, entity[0]) and matches(CLIENT_ID, entity[1]):
                result.append((entity, values))
        return result

    # -- AlterClientQuotas ---------------------------------------------------------------------
    def check_alteration(
        self,
        entity_parts: Iterable[tuple[str, str | None]],
        ops: Iterable[Op],
        pending: Mapping[Entity, dict[str, str]] | None = None,
    ) -> tuple[Entity, dict[str, str]]:
        """The entity an AlterClientQuotas entry names and its whole config once ``ops`` are
        applied (to ``pending``'s config for it when earlier entries of the request changed it),
        checked as ZkAdminManager.alterClientQuotas checks them. Raises QuotaRequestError."""
        parts = list(entity_parts)
        if not parts:
            raise QuotaRequestError(ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity")
        named: dict[str, str | None] = {}
        for entity_type, name in parts:
            if entity_type not in (USER, CLIENT_ID, IP):
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {entity_type}"
                )
            if name is not None and name == "":
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"Empty {entity_type} not supported"
                )
            named[entity_type] = DEFAULT if name is None else sanitize(name)
        if IP in named:
            if len(named) > 1:
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST,
                    "Invalid quota entity combination, IP entity should not be used with "
                    "user/client ID entity.",
                )
            raise QuotaRequestError(
                ErrorCode.INVALID_REQUEST,
                "chronolog does not enforce IP connection-creation quotas; set user or "
                "client-id quotas instead",
            )
        entity: Entity = (named.get(USER), named.get(CLIENT_ID))
        base = (pending or {}).get(entity)
        config = dict(self.entities.get(entity, {}) if base is None else base)
        for op in ops:
            if op.remove:
                config.pop(op.key, None)
                continue
            kind = QUOTA_CONFIG_TYPES.get(op.key)
            if kind is None:
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}"
                )
            if kind == "DOUBLE":
                config[op.key] = java_double_string(op.value)
                continue
            whole = int(op.value + 1e-6) if math.isfinite(op.value) else None
            if whole is None or abs(whole - op.value) > 1e-6:
                raise QuotaRequestError(
                    ErrorCode.INVALID_REQUEST, f"Configuration {op.key} must be a {kind} value"
                )
            config[op.key] = str(whole)
        return entity, config

    async def save(self, changes: list[tuple[Entity, dict[str, str]]]) -> None:
        """Store the entities' new configs (file or ZooKeeper), then apply them. Raises OSError
        (file) or kazoo's exceptions (ZooKeeper); nothing is applied then."""
        if self.zk_store is not None:
            for entity, config in changes:
                await self.zk_store.save(entity_path(entity), config)
                self.adopt(entity, config)
            return
        assert self.file_store is not None
        entities = dict(self.entities)
        for entity, config in changes:
            entities[entity] = config
        await workers.run_sync(self.file_store.save, entities)
        for entity, config in changes:
            self.adopt(entity, config)


def entity_parts(entity: Entity) -> list[tuple[str, str | None]]:
    """The (entity type, name) pairs of an answer: names desanitized, None for a default."""
    parts = []
    for entity_type, name in ((USER, entity[0]), (CLIENT_ID, entity[1])):
        if name is not None:
            parts.append((entity_type, None if name == DEFAULT else desanitize(name)))
    return parts


def java_double_string(value: float) -> str:
    """Java's Double.toString, as Kafka stores a DOUBLE quota (``200.0``, ``1.0E7``)."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:f}"
    sign, digits, exponent = Decimal(repr(float(value))).as_tuple()
    shown = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) + int(exponent) - 1
    return f"{'-' if sign else ''}{shown[0]}.{shown[1:] or '0'}E{power}"


def _is_number(raw: str) -> bool:
    try:
        float(raw)
        return True
    except ValueError:
        return False


def _number(entity: Entity, key: str, raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        logger.error(
            "ignoring a client quota that is not a number",
            entity=entity_path(entity),
            key=key,
            value=raw,
            action="set it again with kafka-configs.sh or chronolog quotas",
        )
        return None
