"""Client quotas as Kafka enforces them (KIP-13, KIP-55, KIP-124; ClientQuotaManager and
ClientRequestQuotaManager): produce and fetch byte rates and the request percentage, per user,
client id, or (user, client id), with defaults at each level. Pure: time is passed in.

An entity is ``(user, client id)``, each the name Kafka's Sanitizer makes of it (URL-encoded, so
``<default>`` can stand for the default at that level) or None when the entity does not name
that level: ``("alice", None)`` is /config/users/alice, ``("<default>", "app")`` is
/config/users/<default>/clients/app, ``(None, "<default>")`` is /config/clients/<default>.
A client takes the quota of the most specific entity that matches it, in Kafka's order:

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

Clients that match the same entity share its rate (Kafka's metric tags: two client ids under
/config/users/alice are measured together; under /config/clients/<default> each client id has
its own). The rate is broker/quotas/rate.py's; a client over its bound is throttled for the time
that brings the rate back to it (KIP-219: the answer goes out at once with that
throttle_time_ms, then the connection is not read for that long). Request-percentage throttles
are capped at one window, as Kafka's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import quote, unquote_plus

from broker.quotas.rate import Rate, throttle_time_ms

__all__ = [
    "DEFAULT",
    "QUOTA_CONFIG_TYPES",
    "ClientQuotaManager",
    "Entity",
    "QuotaKind",
    "QuotaSensor",
    "desanitize",
    "entity_path",
    "parse_entity_path",
    "sanitize",
    "user_of",
]

DEFAULT = "<default>"  # Kafka's ZooKeeperInternals.DEFAULT_STRING
USER, CLIENT_ID, IP = "user", "client-id", "ip"  # ClientQuotaEntity's entity types

Entity = tuple[str | None, str | None]

# The quota configs of users and client ids (QuotaConfig.buildUserClientQuotaConfigDef) with
# their ConfigDef types; AlterClientQuotas takes whole numbers for the LONG ones.
QUOTA_CONFIG_TYPES = {
    "producer_byte_rate": "LONG",
    "consumer_byte_rate": "LONG",
    "request_percentage": "DOUBLE",
    "controller_mutation_rate": "DOUBLE",
}


class QuotaKind(enum.Enum):
    """A quota manager's type: Kafka's QuotaType name (its metric group) and config key."""

    PRODUCE = ("Produce", "producer_byte_rate")
    FETCH = ("Fetch", "consumer_byte_rate")
    REQUEST = ("Request", "request_percentage")

    @property
    def group(self) -> str:
        return self.value[0]

    @property
    def config_key(self) -> str:
        return self.value[1]


@lru_cache(maxsize=4096)
def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: Java's URLEncoder (UTF-8; letters, digits and ``.-*_`` kept,
    space as ``+``), then ``*`` as %2A and ``+`` as %20."""
    return quote(name, safe="-._").replace("~", "%7E")


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder)."""
    return unquote_plus(name)


def user_of(principal: str) -> str:
    """The user a principal (``User:alice``) is quota'd as: its name, sanitized."""
    return sanitize(principal.partition(":")[2] or principal)


def entity_path(entity: Entity) -> str:
    """The entity's path under /config (users/u, users/u/clients/c or clients/c)."""
    user, client = entity
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    if user is not None:
        return f"users/{user}"
    if client is not None:
        return f"clients/{client}"
    raise ValueError("an entity names a user, a client id or both")


def parse_entity_path(path: str) -> Entity | None:
    """The entity of a path under /config (None: not a user or client entity)."""
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users" and parts[1]:
        return (parts[1], None)
    if len(parts) == 2 and parts[0] == "clients" and parts[1]:
        return (None, parts[1])
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return (parts[1], parts[3])
    return None


_CLIENT_LEVEL, _USER_LEVEL, _USER_CLIENT_LEVEL = 1, 2, 4


@dataclass(eq=False)
class QuotaSensor:
    """What one quota entity's clients did: the measured rate (Kafka's byte-rate or request-time
    metric), the throttle times handed out (its throttle-time metric) and when it was last used."""

    rate: Rate
    last_used_ms: int
    throttle_ms_total: int = 0
    throttles: int = 0
    recorded_total: float = 0.0
    bound: float | None = field(default=None)


class ClientQuotaManager:
    """One quota type's limits and rates (Kafka's ClientQuotaManager with its default callback);
    see the module docstring. Sensors unused for an hour are dropped, as Kafka's expire."""

    SENSOR_EXPIRY_MS = 3600 * 1000

    def __init__(self, kind: QuotaKind, samples: int = 11, window_s: int = 1) -> None:
        self.kind = kind
        self.samples = samples
        self.window_ms = window_s * 1000
        self.overrides: dict[Entity, float] = {}
        # Kafka's quotaTypesEnabled: the levels quotas were ever set at (until a restart); with
        # one level the metric tags are that level's without looking further
        self.levels = 0
        self.sensors: dict[tuple[str, str], QuotaSensor] = {}
        self._next_sweep_ms = 0

    @property
    def enabled(self) -> bool:
        """Whether any quota of this type was set since the start: only then are rates kept."""
        return self.levels != 0

    def update(self, entity: Entity, bound: float | None) -> None:
        """Set (or with None remove) the entity's quota."""
        user, client = entity
        if user is not None:
            self.levels |= _USER_CLIENT_LEVEL if client is not None else _USER_LEVEL
        elif client is not None:
            self.levels |= _CLIENT_LEVEL
        if bound is None:
            self.overrides.pop(entity, None)
        else:
            self.overrides[entity] = bound
        for tags, sensor in self.sensors.items():
            sensor.bound = self.limit(tags)

    def metric_tags(self, user: str, client: str) -> tuple[str, str]:
        """(user, client id) of the entity whose rate this client shares: "" for a level the
        quota that applies does not name (Kafka's quotaMetricTags)."""
        levels = self.levels
        if levels in (0, _CLIENT_LEVEL):
            return ("", client)
        if levels == _USER_LEVEL:
            return (user, "")
        if levels == _USER_CLIENT_LEVEL:
            return (user, client)
        o = self.overrides
        if (user, client) in o or (user, DEFAULT) in o:
            return (user, client)
        if (user, None) in o:
            return (user, "")
        if (DEFAULT, client) in o or (DEFAULT, DEFAULT) in o:
            return (user, client)
        if (DEFAULT, None) in o:
            return (user, "")
        return ("", client)

    def limit(self, tags: tuple[str, str]) -> float | None:
        """The bound for the entity of these metric tags, in precedence order (None: none)."""
        user, client = tags
        o = self.overrides
        if user and client:
            candidates: tuple[Entity, ...] = (
                (user, client),
                (user, DEFAULT),
                (DEFAULT, client),
                (DEFAULT, DEFAULT),
            )
        elif user:
            candidates = ((user, None), (DEFAULT, None))
        elif client:
            candidates = ((None, client), (None, DEFAULT))
        else:
            return None
        for entity in candidates:
            bound = o.get(entity)
            if bound is not None:
                return bound
        return None

    def quota_for(self, user: str, client: str) -> float | None:
        """The bound a client with this (sanitized) user and client id gets."""
        return self.limit(self.metric_tags(user, client))

    def sensor(self, user: str, client: str, now_ms: int) -> QuotaSensor:
        if now_ms >= self._next_sweep_ms:
            self._sweep(now_ms)
        tags = self.metric_tags(user, client)
        sensor = self.sensors.get(tags)
        if sensor is None:
            sensor = self.sensors[tags] = QuotaSensor(
                Rate(self.samples, self.window_ms), now_ms, bound=self.limit(tags)
            )
        sensor.last_used_ms = now_ms
        return sensor

    def record(self, user: str, client: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or percent of a second of request time) for the client and
        return the throttle time in ms it earned (0: within its quota or no quota)."""
        if not self.levels:
            return 0
        sensor = self.sensor(user, client, now_ms)
        sensor.rate.record(value, now_ms)
        sensor.recorded_total += value
        bound = sensor.bound
        if bound is None:
            return 0
        if bound <= 0:  # nothing allowed: the longest wait the window can ask for
            throttle = self.samples * self.window_ms
        else:
            throttle = throttle_time_ms(sensor.rate, bound, now_ms)
        if self.kind is QuotaKind.REQUEST:
            throttle = min(throttle, self.window_ms)  # ClientRequestQuotaManager's bound
        return throttle

    def unrecord(self, user: str, client: str, value: float, now_ms: int) -> None:
        """Take back a value recorded for an answer that did not carry it."""
        if self.levels:
            sensor = self.sensor(user, client, now_ms)
            sensor.rate.record(-value, now_ms)
            sensor.recorded_total -= value

    def throttled(self, user: str, client: str, throttle_ms: int, now_ms: int) -> None:
        """Count a throttle of the client (the throttle-time metric)."""
        sensor = self.sensor(user, client, now_ms)
        sensor.throttle_ms_total += throttle_ms
        sensor.throttles += 1

    def _sweep(self, now_ms: int) -> None:
        expired = now_ms - self.SENSOR_EXPIRY_MS
        for tags in [t for t, s in self.sensors.items() if s.last_used_ms < expired]:
            del self.sensors[tags]
        self._next_sweep_ms = now_ms + 60_000
