"""Broker and topic configuration: Kafka's property names, parsed and validated.

Every key is declared once, in :data:`KEYS`: its Kafka name, type, default, minimum, validator and
scope. Broker properties come from a Java ``.properties`` file plus ``key=value`` overrides and
use Kafka's broker names (``log.segment.bytes``, ``log.retention.hours``, ...). Topic configs use
Kafka's topic names (``segment.bytes``, ``retention.ms``, ...); each names the broker properties
(its synonyms, as Kafka's DescribeConfigs reports them) that set the default every topic starts
from. From the table come :class:`BrokerConfig`, :class:`TopicConfig`, storage's ``LogConfig``
and the validator's ``TopicSettings``. The keys storage owns (``segment.bytes``, ``flush.ms``,
...) take their default and minimum from ``LogConfig``, where the reasons for them live. Every
other name Kafka 4.1 defines (broker/admin/kafka_configs.py, generated from Kafka's definitions)
is accepted with Kafka's type, default and bounds, kept and reported, but not acted on
(:data:`KAFKA_ONLY_BROKER_KEYS`, :data:`KAFKA_ONLY_TOPIC_KEYS`). Unknown keys and bad values
raise :class:`ConfigError` naming the key, never a bare ``ValueError``.

Deliberate departures from Kafka (also in the README):
- ``max.message.time.difference.ms`` (KIP-32's name) is accepted as an alias of
  ``message.timestamp.difference.max.ms``.
- ``log.flush.scheduler.interval.ms`` defaults to 1000 instead of Long.MaxValue, so a topic's
  ``flush.ms`` takes effect without further tuning.
- ``segment.index.bytes`` must be at least 24 (two time-index entries), not 0: a smaller index is
  always full and would roll a segment on every append. Likewise ``segment.bytes`` >= 26 (one
  minimal entry), ``segment.ms`` >= 1 and ``flush.messages`` >= 1.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import javaproperties

from broker.admin import kafka_configs
from broker.security import settings as security_settings
from protocol.records import Codec, TimestampType
from protocol.validator import TopicSettings
from storage import LogConfig
from storage.config import MINIMUMS as LOG_MINIMUMS

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE
MINUTE_MS = 60 * 1000
HOUR_MS = 60 * MINUTE_MS

TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class ConfigError(ValueError):
    """Raised when a broker property or topic config has an unknown name or an invalid value.

    ``key`` names the offending property; ``str(exc)`` says what is wrong with it.
    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


def topic_name_error(name: str) -> str | None:
    """The reason ``name`` is not a legal topic name, or None when it is (Kafka's Topic.validate)."""
    if name in (".", ".."):
        return f"topic name {name!r} is not allowed"
    if not name:
        return "topic name is empty"
    if len(name) > 249:
        return f"topic name is {len(name)} characters long, at most 249 are allowed"
    if not TOPIC_NAME_RE.match(name):
        return f"topic name {name!r} may only contain ASCII letters, digits, '.', '_' and '-'"
    return None


# ---------------------------------------------------------------------------------------------
# The key table's vocabulary (Kafka's ConfigDef: Type, Range.atLeast, ValidString.in, a validator).


class Type(enum.Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"  # a comma-separated string (IncrementalAlterConfigs may APPEND/SUBTRACT)
    PASSWORD = "password"  # a string never shown: DescribeConfigs reports it sensitive, no value
    SHORT = "short"
    CLASS = "class"  # a Java class name (only Kafka's names chronolog does not act on)


_RANGES = {
    Type.SHORT: (-(2**15), 2**15 - 1),
    Type.INT: (-(2**31), INT_MAX),
    Type.LONG: (-(2**63), LONG_MAX),
}


class Scope(enum.Enum):
    BROKER = "broker"  # a broker property
    TOPIC = "topic"  # a topic config; broker properties (its synonyms) set its default


@dataclass(frozen=True)
class Synonym:
    """A broker property that sets a topic config's default, in ``unit`` (ms) per its unit."""

    name: str
    unit: int = 1


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key. ``validator`` checks the typed value and returns it normalised, or
    raises ValueError(reason). A topic key's ``synonyms`` are tried in order; the first one given
    wins, else the topic default applies."""

    name: str
    type: Type
    default: Any
    scope: Scope
    minimum: int | None = None
    choices: tuple[str, ...] = ()
    maximum: int | float | None = None
    validator: Callable[[Any], Any] | None = None
    synonyms: tuple[Synonym, ...] = ()

    @property
    def attribute(self) -> str:
        """The Python attribute holding this key's value (``segment.bytes`` -> ``segment_bytes``)."""
        return self.name.replace(".", "_")

    def parse(self, raw: str) -> Any:
        """The typed value of ``raw``; raises ValueError saying what is wrong with it."""
        value: Any = raw.strip()
        if self.type is Type.BOOLEAN:
            if value.lower() not in ("true", "false"):
                raise ValueError(f"{raw!r} is not true or false")
            value = value.lower() == "true"
        elif self.type is Type.DOUBLE:
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"{raw!r} is not a number") from None
            if value != value:
                raise ValueError(f"{raw!r} is not a number")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"{value} is below the minimum {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise ValueError(f"{value} is above the maximum {self.maximum}")
        elif self.type in _RANGES:
            lo: int | float
            hi: int | float
            lo, hi = _RANGES[self.type]
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"{raw!r} is not an integer") from None
            lo = lo if self.minimum is None else self.minimum
            hi = hi if self.maximum is None else self.maximum
            if not lo <= value <= hi:
                raise ValueError(f"{value} is out of range [{lo}, {hi}]")
        elif self.choices and value not in self.choices:
            raise ValueError(f"{raw!r} is not one of {', '.join(self.choices)}")
        return value if self.validator is None else self.validator(value)

    def broker_keys(self) -> list[ConfigKey]:
        """The broker properties a topic key's synonyms declare. The last synonym carries the
        default (in its unit); the ones before it override it only when given."""
        keys = []
        for i, synonym in enumerate(self.synonyms):
            last = i == len(self.synonyms) - 1
            scaled = synonym.unit != 1
            keys.append(
                dataclasses.replace(
                    self,
                    name=synonym.name,
                    scope=Scope.BROKER,
                    synonyms=(),
                    type=Type.INT if scaled else self.type,
                    default=(self.default // synonym.unit if scaled else self.default)
                    if last
                    else None,
                    minimum=None if self.minimum is None else -(-self.minimum // synonym.unit),
                )
            )
        return keys


# ---------------------------------------------------------------------------------------------
# Validators of typed values: each returns the value (normalised) or raises ValueError(reason).


def _cleanup_policy(value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"{value!r} is not a list of delete, compact")
    return ",".join(parts)


def _ratio(value: float) -> float:
    if not 0 <= value <= 1:
        raise ValueError(f"{value} is out of range [0, 1]")
    return value


def _unlimited_if_negative(value: int) -> int:
    return max(value, -1)  # Kafka's KafkaConfig.logRetentionTimeMillis: any negative is -1


def _non_empty(value: str) -> str:
    if not value:
        raise ValueError("value is empty")
    return value


def _checked(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """A validator that checks a value with ``parse`` and keeps it as written."""

    def check(value: str) -> str:
        parse(value)
        return value

    return check


def _http_listener(value: str) -> tuple[str, int] | None:
    """``http://host:port`` (an empty host listens on every interface, port 0 picks a free one,
    IPv6 hosts in brackets); empty: no listener."""
    if not value:
        return None
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9+.-]*)://(\[[^\]\s/]*\]|[^:/\s\[\]]*):(\d+)/?", value)
    if not m:
        raise ValueError(f"{value!r} is not of the form http://host:port")
    if m.group(1).lower() != "http":
        raise ValueError(f"scheme {m.group(1)!r} is not supported; use http://host:port")
    port = int(m.group(3))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range [0, 65535]")
    return m.group(2).strip("[]"), port


def _zookeeper_connect(value: str) -> str:
    """``host:port[,host:port...][/chroot]``, as Kafka's zookeeper.connect."""
    hosts, slash, chroot = value.partition("/")
    for host in hosts.split(","):
        if not re.fullmatch(r"[^\s:,/]+:\d{1,5}", host.strip()):
            raise ValueError(f"{value!r} is not of the form host:port[,host:port...][/chroot]")
    if slash and (not chroot or chroot.startswith("/") or chroot.endswith("/") or "//" in chroot):
        raise ValueError(f"chroot /{chroot} must be a path without a trailing slash")
    return value


# Kafka's MetadataVersion names (server-common MetadataVersion.java at 3.9.0), each release with
# its "-IVn" variants, oldest first: the values of message.format.version and
# inter.broker.protocol.version. Up to 0.9.0 store magic 0, 0.10.x magic 1 (KIP-32), 0.11.0 and
# later magic 2 (record batches, KIP-98). Kafka 3.x ignores message.format.version for brokers at
# 3.0+; chronolog honours it, so a topic can still be held to an old format.
_IV_COUNTS = {
    "0.10.0": 2,
    "0.10.1": 3,
    "0.10.2": 1,
    "0.11.0": 3,
    "1.0": 1,
    "1.1": 1,
    "2.0": 2,
    "2.1": 3,
    "2.2": 2,
    "2.3": 2,
    "2.4": 2,
    "2.5": 1,
    "2.6": 1,
    "2.7": 3,
    "2.8": 2,
    "3.0": 2,
    "3.1": 1,
    "3.2": 1,
    "3.3": 4,
    "3.4": 1,
    "3.5": 3,
    "3.6": 3,
    "3.7": 5,
    "3.8": 1,
    "3.9": 1,
}
_RELEASES = {"0.8.0": 1, "0.8.1": 1, "0.8.2": 1, "0.9.0": 1, **_IV_COUNTS}
# name -> (release rank, IV): a release named without "-IVn" is its last IV, as Kafka's
# MetadataVersion.fromVersionString reads it ("2.1" is 2.1-IV2).
_VERSION_ORDER: dict[str, tuple[int, int]] = {}
for _rank, (_short, _count) in enumerate(_RELEASES.items()):
    _VERSION_ORDER[_short] = (_rank, _count - 1)
    if _short in _IV_COUNTS:
        _VERSION_ORDER.update({f"{_short}-IV{n}": (_rank, n) for n in range(_count)})
DEFAULT_FORMAT_VERSION = "3.0-IV1"  # Kafka 3.9's default: record batches (magic 2)
LATEST_METADATA_VERSION = "3.9"  # inter.broker.protocol.version's default (Kafka 3.9's latest)


def _metadata_version(value: str) -> str:
    if value in _VERSION_ORDER:
        return value
    # Kafka accepts full release numbers (0.10.1.0, 0.9.0.1, 2.8.1) by their short version.
    parts = value.split(".")
    short = ".".join(parts[:3] if parts[0] == "0" else parts[:2])
    rest = parts[3:] if parts[0] == "0" else parts[2:]
    if short in _RELEASES and len(rest) == 1 and rest[0].isdigit():
        return short
    raise ValueError(f"{value!r} is not a Kafka version (0.8.0 ... 3.9, optionally with -IVn)")


def metadata_version_at_least(version: str, floor: str) -> bool:
    """Kafka's MetadataVersion.isAtLeast for two validated version names."""
    return _VERSION_ORDER[version] >= _VERSION_ORDER[floor]


def format_magic(version: str) -> int:
    """The message magic (0, 1 or 2) a message.format.version stores."""
    if not metadata_version_at_least(version, "0.10.0-IV0"):
        return 0
    return 1 if not metadata_version_at_least(version, "0.11.0-IV0") else 2


# The oldest inter.broker.protocol.version that can store each magic (MetadataVersion.minSupportedFor).
_MIN_VERSION_FOR_MAGIC = {0: "0.8.0", 1: "0.10.0", 2: "0.11.0"}


# ---------------------------------------------------------------------------------------------
# The table. Topic configs: LogConfig.scala's names and defaults; broker properties:
# KafkaConfig.scala's. Keys storage owns take their default and minimum from LogConfig.

_LOG_DEFAULTS = LogConfig()
_B, _T = Scope.BROKER, Scope.TOPIC
_CODEC_NAMES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _log(name: str, type_: Type, *synonyms: Synonym, **extra: Any) -> ConfigKey:
    """A topic key that storage's LogConfig owns (default and minimum from there)."""
    field = name.replace(".", "_")
    return ConfigKey(
        name,
        type_,
        getattr(_LOG_DEFAULTS, field),
        _T,
        minimum=LOG_MINIMUMS.get(field),
        synonyms=synonyms,
        **extra,
    )


# fmt: off
KEYS: tuple[ConfigKey, ...] = (
    # Broker properties.
    ConfigKey("listeners", Type.STRING, "PLAINTEXT://:9092", _B,
              validator=security_settings.parse_listener_list),
    ConfigKey("advertised.listeners", Type.STRING, None, _B,
              validator=security_settings.parse_listener_list),
    ConfigKey("broker.id", Type.INT, 0, _B, minimum=0),
    ConfigKey("log.dirs", Type.STRING, None, _B, validator=_non_empty),
    ConfigKey("log.dir", Type.STRING, "/tmp/kafka-logs", _B, validator=_non_empty),
    ConfigKey("num.partitions", Type.INT, 1, _B, minimum=1),
    ConfigKey("auto.create.topics.enable", Type.BOOLEAN, True, _B),
    ConfigKey("log.retention.check.interval.ms", Type.LONG, 300000, _B, minimum=1),
    ConfigKey("log.flush.scheduler.interval.ms", Type.LONG, 1000, _B, minimum=1),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", Type.INT, 60000, _B, minimum=0),
    ConfigKey("socket.request.max.bytes", Type.INT, 104857600, _B, minimum=1),
    ConfigKey("max.connections", Type.INT, INT_MAX, _B, minimum=1),
    ConfigKey("fetch.max.bytes", Type.INT, 57671680, _B, minimum=1024),
    # Kafka: "The number of threads that the server uses for processing requests, which may
    # include disk I/O". Here: the worker threads that CPU work beside the event loop (fetch
    # down-conversion) may use at once; more wait their turn (broker/handlers/fetch.py).
    ConfigKey("num.io.threads", Type.INT, 8, _B, minimum=1),
    ConfigKey("connections.max.idle.ms", Type.LONG, 600000, _B, minimum=1),
    ConfigKey("offset.metadata.max.bytes", Type.INT, 4096, _B, minimum=0),
    ConfigKey("offsets.retention.minutes", Type.INT, 1440, _B, minimum=1),
    ConfigKey("offsets.retention.check.interval.ms", Type.LONG, 600000, _B, minimum=1),
    ConfigKey("group.min.session.timeout.ms", Type.INT, 6000, _B),
    ConfigKey("group.max.session.timeout.ms", Type.INT, 300000, _B),
    ConfigKey("group.initial.rebalance.delay.ms", Type.INT, 3000, _B, minimum=0),
    ConfigKey("group.max.size", Type.INT, INT_MAX, _B, minimum=1),
    ConfigKey("max.incremental.fetch.session.cache.slots", Type.INT, 1000, _B, minimum=0),
    ConfigKey("metrics.listener", Type.STRING, None, _B, validator=_http_listener),
    ConfigKey("console.read.only", Type.BOOLEAN, True, _B),
    # Listeners' security (broker/security/settings.py); the ssl.* and sasl.enabled.mechanisms
    # keys may also be set per listener, listener.name.<name>.<key>.
    ConfigKey("listener.security.protocol.map", Type.STRING,
              security_settings.DEFAULT_PROTOCOL_MAP, _B,
              validator=_checked(security_settings.parse_protocol_map)),
    ConfigKey("ssl.keystore.type", Type.STRING, "JKS", _B),
    ConfigKey("ssl.keystore.location", Type.STRING, None, _B),
    ConfigKey("ssl.keystore.password", Type.PASSWORD, None, _B),
    ConfigKey("ssl.key.password", Type.PASSWORD, None, _B),
    ConfigKey("ssl.truststore.type", Type.STRING, "JKS", _B),
    ConfigKey("ssl.truststore.location", Type.STRING, None, _B),
    ConfigKey("ssl.truststore.password", Type.PASSWORD, None, _B),
    ConfigKey("ssl.client.auth", Type.STRING, "none", _B, choices=("none", "requested", "required")),
    ConfigKey("ssl.enabled.protocols", Type.STRING, "TLSv1.2,TLSv1.3", _B,
              validator=_checked(security_settings.parse_protocols)),
    ConfigKey("ssl.principal.mapping.rules", Type.STRING, "DEFAULT", _B,
              validator=security_settings.parse_principal_rules),
    ConfigKey("sasl.enabled.mechanisms", Type.STRING, "GSSAPI", _B,
              validator=_checked(security_settings.parse_mechanisms)),
    ConfigKey("connection.failed.authentication.delay.ms", Type.INT, 100, _B, minimum=0),
    ConfigKey("connections.max.reauth.ms", Type.LONG, 0, _B, minimum=0,
              validator=security_settings.parse_reauth),
    ConfigKey("ssl.protocol", Type.STRING, "TLSv1.3", _B, choices=("TLSv1.2", "TLSv1.3", "TLS")),
    ConfigKey("ssl.endpoint.identification.algorithm", Type.STRING, "https", _B),
    # Inter-broker settings: checked against the listeners (a single broker does not use them).
    ConfigKey("security.inter.broker.protocol", Type.STRING, "PLAINTEXT", _B,
              choices=security_settings.PROTOCOLS),
    ConfigKey("inter.broker.listener.name", Type.STRING, None, _B),
    ConfigKey("sasl.mechanism.inter.broker.protocol", Type.STRING, "GSSAPI", _B,
              validator=_checked(security_settings.parse_mechanisms)),
    ConfigKey("authorizer.class.name", Type.STRING, "", _B,
              validator=security_settings.parse_authorizer),
    ConfigKey("super.users", Type.STRING, "", _B,
              validator=_checked(security_settings.parse_super_users)),
    ConfigKey("allow.everyone.if.no.acl.found", Type.BOOLEAN, False, _B),
    # Delegation tokens (broker/security/tokens.py): off without a secret key.
    ConfigKey("delegation.token.secret.key", Type.PASSWORD, None, _B),
    ConfigKey("delegation.token.max.lifetime.ms", Type.LONG, 604800000, _B, minimum=1),
    ConfigKey("delegation.token.expiry.time.ms", Type.LONG, 86400000, _B, minimum=1),
    ConfigKey("delegation.token.expiry.check.interval.ms", Type.LONG, 3600000, _B, minimum=1),
    # The log cleaner (broker/cleaner.py, storage/cleaner.py): Kafka's CleanerConfig.
    ConfigKey("log.cleaner.enable", Type.BOOLEAN, True, _B),
    ConfigKey("log.cleaner.threads", Type.INT, 1, _B, minimum=0),
    ConfigKey("log.cleaner.backoff.ms", Type.LONG, 15000, _B, minimum=0),
    ConfigKey("log.cleaner.dedupe.buffer.size", Type.LONG, 134217728, _B, minimum=1),
    ConfigKey("log.cleaner.io.max.bytes.per.second", Type.DOUBLE, DOUBLE_MAX, _B, minimum=0),
    # Moves between log dirs (broker/replica_moves.py): bytes copied per second, at most.
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", Type.LONG, LONG_MAX, _B, minimum=0),
    # The cluster (broker/cluster/): ZooKeeper, replication.
    ConfigKey("zookeeper.connect", Type.STRING, None, _B, validator=_zookeeper_connect),
    ConfigKey("zookeeper.session.timeout.ms", Type.INT, 18000, _B, minimum=1),
    ConfigKey("zookeeper.connection.timeout.ms", Type.INT, 18000, _B, minimum=1),
    ConfigKey("broker.rack", Type.STRING, None, _B, validator=_non_empty),
    ConfigKey("default.replication.factor", Type.INT, 1, _B, minimum=1),
    ConfigKey("offsets.topic.replication.factor", Type.INT, 3, _B, minimum=1),
    # The transaction coordinator (broker/txn/), Kafka's TransactionLogConfig and
    # TransactionStateManagerConfig names and defaults.
    ConfigKey("transaction.state.log.num.partitions", Type.INT, 50, _B, minimum=1),
    ConfigKey("transaction.state.log.replication.factor", Type.INT, 3, _B, minimum=1),
    ConfigKey("transaction.state.log.min.isr", Type.INT, 2, _B, minimum=1),
    ConfigKey("transaction.state.log.segment.bytes", Type.INT, 104857600, _B, minimum=1),
    ConfigKey("transaction.max.timeout.ms", Type.INT, 900000, _B, minimum=1),
    ConfigKey("transactional.id.expiration.ms", Type.INT, 604800000, _B, minimum=1),
    ConfigKey(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", Type.INT, 10000, _B, minimum=1
    ),
    ConfigKey(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        Type.INT,
        3600000,
        _B,
        minimum=1,
    ),
    ConfigKey("transaction.partition.verification.enable", Type.BOOLEAN, True, _B),
    ConfigKey("replica.lag.time.max.ms", Type.LONG, 30000, _B, minimum=1),
    ConfigKey("replica.fetch.wait.max.ms", Type.INT, 500, _B, minimum=0),
    ConfigKey("replica.fetch.min.bytes", Type.INT, 1, _B, minimum=1),
    ConfigKey("replica.fetch.max.bytes", Type.INT, 1048576, _B, minimum=0),
    ConfigKey("replica.fetch.response.max.bytes", Type.INT, 10485760, _B, minimum=0),
    ConfigKey("replica.fetch.backoff.ms", Type.INT, 1000, _B, minimum=0),
    ConfigKey("replica.socket.timeout.ms", Type.INT, 30000, _B, minimum=1),
    ConfigKey("replica.high.watermark.checkpoint.interval.ms", Type.LONG, 5000, _B, minimum=1),
    ConfigKey("controller.socket.timeout.ms", Type.INT, 30000, _B, minimum=1),
    ConfigKey("controlled.shutdown.enable", Type.BOOLEAN, True, _B),
    ConfigKey("controlled.shutdown.max.retries", Type.INT, 3, _B, minimum=1),
    ConfigKey("controlled.shutdown.retry.backoff.ms", Type.LONG, 5000, _B, minimum=0),
    # The client quotas' rate window (broker/quotas/rate.py): samples of so many seconds each.
    ConfigKey("quota.window.num", Type.INT, 11, _B, minimum=1),
    ConfigKey("quota.window.size.seconds", Type.INT, 1, _B, minimum=1),
    # The versions of the records the group coordinator writes to __consumer_offsets, for
    # readers that know only older ones (broker/groups/offsets.py).
    ConfigKey("inter.broker.protocol.version", Type.STRING, LATEST_METADATA_VERSION, _B,
              validator=_metadata_version),
    # Topic configs, each with the broker properties that set its default.
    ConfigKey("cleanup.policy", Type.LIST, "delete", _T, validator=_cleanup_policy,
              synonyms=(Synonym("log.cleanup.policy"),)),
    ConfigKey("compression.type", Type.STRING, "producer", _T, choices=_CODEC_NAMES,
              synonyms=(Synonym("compression.type"),)),
    _log("delete.retention.ms", Type.LONG, Synonym("log.cleaner.delete.retention.ms")),
    _log("file.delete.delay.ms", Type.LONG, Synonym("log.segment.delete.delay.ms")),
    _log("flush.messages", Type.LONG, Synonym("log.flush.interval.messages")),
    _log("flush.ms", Type.LONG, Synonym("log.flush.interval.ms")),
    _log("index.interval.bytes", Type.INT, Synonym("log.index.interval.bytes")),
    _log("max.compaction.lag.ms", Type.LONG, Synonym("log.cleaner.max.compaction.lag.ms")),
    _log("max.message.bytes", Type.INT, Synonym("message.max.bytes")),
    ConfigKey("message.format.version", Type.STRING, DEFAULT_FORMAT_VERSION, _T,
              validator=_metadata_version, synonyms=(Synonym("log.message.format.version"),)),
    ConfigKey("message.timestamp.after.max.ms", Type.LONG, LONG_MAX, _T, minimum=0,
              synonyms=(Synonym("log.message.timestamp.after.max.ms"),)),
    ConfigKey("message.timestamp.before.max.ms", Type.LONG, LONG_MAX, _T, minimum=0,
              synonyms=(Synonym("log.message.timestamp.before.max.ms"),)),
    ConfigKey("message.timestamp.difference.max.ms", Type.LONG, LONG_MAX, _T, minimum=0,
              synonyms=(Synonym("log.message.timestamp.difference.max.ms"),)),
    ConfigKey("message.timestamp.type", Type.STRING, "CreateTime", _T, choices=_TIMESTAMP_TYPES,
              synonyms=(Synonym("log.message.timestamp.type"),)),
    ConfigKey("min.insync.replicas", Type.INT, 1, _T, minimum=1,
              synonyms=(Synonym("min.insync.replicas"),)),
    _log("min.cleanable.dirty.ratio", Type.DOUBLE, Synonym("log.cleaner.min.cleanable.ratio"),
         validator=_ratio),
    _log("min.compaction.lag.ms", Type.LONG, Synonym("log.cleaner.min.compaction.lag.ms")),
    _log("retention.bytes", Type.LONG, Synonym("log.retention.bytes")),
    _log("retention.ms", Type.LONG, Synonym("log.retention.ms"),
         Synonym("log.retention.minutes", MINUTE_MS), Synonym("log.retention.hours", HOUR_MS),
         validator=_unlimited_if_negative),
    _log("segment.bytes", Type.INT, Synonym("log.segment.bytes")),
    _log("segment.index.bytes", Type.INT, Synonym("log.index.size.max.bytes")),
    _log("segment.jitter.ms", Type.LONG, Synonym("log.roll.jitter.ms"),
         Synonym("log.roll.jitter.hours", HOUR_MS)),
    _log("segment.ms", Type.LONG, Synonym("log.roll.ms"), Synonym("log.roll.hours", HOUR_MS)),
    ConfigKey("unclean.leader.election.enable", Type.BOOLEAN, False, _T,
              synonyms=(Synonym("unclean.leader.election.enable"),)),
)
# fmt: on

TOPIC_KEYS: dict[str, ConfigKey] = {k.name: k for k in KEYS if k.scope is Scope.TOPIC}
BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k for key in KEYS for k in ([key] if key.scope is Scope.BROKER else key.broker_keys())
}
TOPIC_ALIASES = {"max.message.time.difference.ms": "message.timestamp.difference.max.ms"}


def _items_in(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A list value's check: every item one of ``choices`` (Kafka's ValidList)."""

    def check(value: str) -> str:
        wrong = [v for v in value.split(",") if v.strip() and v.strip() not in choices]
        if wrong:
            raise ValueError(f"{wrong[0]!r} is not one of {', '.join(choices)}")
        return value

    return check


def _kafka_key(name: str, entry: tuple[Any, ...], scope: Scope) -> ConfigKey:
    """The key of a name Kafka 4.1 defines and chronolog does not act on, from its generated
    definition (broker/admin/kafka_configs.py): Kafka's type, default, bounds and choices."""
    type_name, default, _importance, minimum, maximum, choices = entry[:6]
    type_ = Type[type_name]
    listed = type_ is Type.LIST and bool(choices)
    key = ConfigKey(
        name,
        type_,
        None,
        scope,
        minimum=minimum,
        maximum=maximum,
        choices=tuple(choices or ()) if not listed else (),
        validator=_items_in(tuple(choices)) if listed else None,
        synonyms=tuple(Synonym(n, unit) for n, unit in kafka_configs.TOPIC_SYNONYMS.get(name, ())),
    )
    if default is None:
        return key
    try:
        return dataclasses.replace(key, default=key.parse(default))
    except ValueError:  # a default Kafka's own validator would refuse, kept as written
        return dataclasses.replace(key, default=default)


KAFKA_ONLY_BROKER_KEYS: dict[str, ConfigKey] = {
    name: _kafka_key(name, entry, Scope.BROKER)
    for name, entry in {**kafka_configs.BROKER, **kafka_configs.BROKER_QUOTAS}.items()
    if name not in BROKER_KEYS
}
"""Kafka 4.1's broker properties chronolog accepts (validated, stored, described with Kafka's
defaults) but does not act on; docs/operations.md (Administration) lists them."""
KAFKA_ONLY_TOPIC_KEYS: dict[str, ConfigKey] = {
    name: _kafka_key(name, entry, Scope.TOPIC)
    for name, entry in kafka_configs.TOPIC.items()
    if name not in TOPIC_KEYS
}
"""Kafka 4.1's topic configs chronolog accepts but does not act on, likewise."""
BROKER_UPDATE_MODES: dict[str, str] = {
    name: entry[6]
    for name, entry in {**kafka_configs.BROKER, **kafka_configs.BROKER_QUOTAS}.items()
}
"""How Kafka 4.1 lets AlterConfigs change each of its broker properties: "per-broker",
"cluster-wide", "per-listener" (only under a listener prefix) or "read-only"."""


def not_acted_on(config: BrokerConfig) -> list[str]:
    """The broker properties set in ``config`` that Kafka defines and chronolog only keeps."""
    return sorted(name for name in config.given if name in KAFKA_ONLY_BROKER_KEYS)


def broker_key(name: str) -> ConfigKey | None:
    """The key of any broker property chronolog knows, acted on or not (None: unknown)."""
    return BROKER_KEYS.get(name) or KAFKA_ONLY_BROKER_KEYS.get(name)


def topic_key(name: str) -> ConfigKey | None:
    """The key of any topic config chronolog knows, acted on or not (None: unknown)."""
    return TOPIC_KEYS.get(name) or KAFKA_ONLY_TOPIC_KEYS.get(name)


def _parse(key: ConfigKey, name: str, raw: str) -> Any:
    try:
        return key.parse(raw)
    except ValueError as exc:
        raise ConfigError(name, str(exc)) from None


def parse_topic_configs(entries: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Validate topic config overrides; return them normalised (canonical names, stripped values).

    Raises ConfigError for an unknown name, a bad value, a null value, or a key given twice.
    """
    items = entries.items() if isinstance(entries, Mapping) else entries
    result: dict[str, str] = {}
    for raw_name, raw_value in items:
        name = TOPIC_ALIASES.get(raw_name, raw_name)
        key = topic_key(name)
        if key is None:
            raise ConfigError(raw_name, "unknown topic config")
        if raw_value is None:
            raise ConfigError(raw_name, "value is null")
        if name in result:
            raise ConfigError(raw_name, "given more than once")
        value = _parse(key, raw_name, raw_value)
        result[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return result


_CODECS = {
    "producer": None,
    "uncompressed": Codec.NONE,
    "gzip": Codec.GZIP,
    "snappy": Codec.SNAPPY,
    "lz4": Codec.LZ4,
    "zstd": Codec.ZSTD,
}


@dataclass(frozen=True)
class TopicConfig:
    """The effective configuration of one topic: broker defaults with the topic's overrides.
    One field per topic key of :data:`KEYS` (built from the table by :meth:`resolve`)."""

    cleanup_policy: str
    compression_type: str
    delete_retention_ms: int
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int
    index_interval_bytes: int
    max_compaction_lag_ms: int
    max_message_bytes: int
    message_format_version: str
    message_timestamp_after_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_difference_max_ms: int
    message_timestamp_type: str
    min_insync_replicas: int
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    retention_bytes: int
    retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    segment_jitter_ms: int
    segment_ms: int
    unclean_leader_election_enable: bool

    @property
    def magic(self) -> int:
        return format_magic(self.message_format_version)

    @classmethod
    def resolve(cls, defaults: Mapping[str, Any], overrides: Mapping[str, str]) -> TopicConfig:
        """Topic config from typed broker defaults (by topic key name) and validated overrides."""
        values = dict(defaults)
        for name, raw in overrides.items():
            if name in TOPIC_KEYS:  # Kafka's other names are kept, not acted on
                values[name] = TOPIC_KEYS[name].parse(raw)
        config = cls(**{key.attribute: values[name] for name, key in TOPIC_KEYS.items()})
        if config.compression_type == "zstd" and config.magic < 2:
            raise ConfigError(
                "compression.type",
                "zstd needs message.format.version 0.11.0 or later (record batches, KIP-110)",
            )
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise ConfigError(
                "min.compaction.lag.ms",
                f"{config.min_compaction_lag_ms} exceeds max.compaction.lag.ms "
                f"{config.max_compaction_lag_ms}",
            )
        return config

    def log_config(self) -> LogConfig:
        """Storage's settings for this topic's partition logs (the fields share their names)."""
        return LogConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(LogConfig)})

    def validator_settings(self) -> TopicSettings:
        """The produce validator's settings for this topic."""
        return TopicSettings(
            magic=self.magic,
            timestamp_type=(
                TimestampType.LOG_APPEND_TIME
                if self.message_timestamp_type == "LogAppendTime"
                else TimestampType.CREATE_TIME
            ),
            max_timestamp_difference_ms=self.message_timestamp_difference_max_ms,
            timestamp_before_max_ms=self.message_timestamp_before_max_ms,
            timestamp_after_max_ms=self.message_timestamp_after_max_ms,
            max_message_bytes=self.max_message_bytes,
            target_codec=_CODECS[self.compression_type],
            compacted="compact" in self.cleanup_policy.split(","),
        )


# ---------------------------------------------------------------------------------------------
# Broker properties.


def parse_properties(text: str) -> list[tuple[str, str]]:
    """Parse Java ``.properties`` text into (key, value) pairs in file order, values stripped
    (comments, separators, line continuations and escapes as java.util.Properties reads them)."""
    return [
        (e.key, e.value.strip())
        for e in javaproperties.parse(text)
        if isinstance(e, javaproperties.KeyValue)
    ]


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker configuration. Build it with :meth:`from_properties`.

    One field per broker property of :data:`KEYS`, except the listeners and log dirs, which are
    given as the values derived from them."""

    host: str
    port: int
    advertised_host: str
    advertised_port: int
    broker_id: int
    log_dirs: tuple[str, ...]
    num_partitions: int
    auto_create_topics_enable: bool
    log_retention_check_interval_ms: int
    log_flush_scheduler_interval_ms: int
    log_flush_offset_checkpoint_interval_ms: int
    socket_request_max_bytes: int
    max_connections: int
    fetch_max_bytes: int
    num_io_threads: int
    connections_max_idle_ms: int
    offset_metadata_max_bytes: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    group_max_size: int
    max_incremental_fetch_session_cache_slots: int
    metrics_listener: tuple[str, int] | None
    """(host, port) of the Prometheus endpoint and web console (broker/http.py), None: none."""
    console_read_only: bool
    """The console refuses its destructive actions (delete topic, reset offsets) with 403."""
    log_cleaner_enable: bool
    log_cleaner_threads: int
    log_cleaner_backoff_ms: int
    log_cleaner_dedupe_buffer_size: int
    log_cleaner_io_max_bytes_per_second: float
    replica_alter_log_dirs_io_max_bytes_per_second: int
    delegation_token_secret_key: str | None
    """Signs delegation tokens' HMACs; None: delegation tokens are off."""
    delegation_token_max_lifetime_ms: int
    delegation_token_expiry_time_ms: int
    delegation_token_expiry_check_interval_ms: int
    zookeeper_connect: str | None
    """ZooKeeper's address (with an optional chroot); None: a single broker, no cluster."""
    zookeeper_session_timeout_ms: int
    zookeeper_connection_timeout_ms: int
    broker_rack: str | None
    default_replication_factor: int
    offsets_topic_replication_factor: int
    transaction_state_log_num_partitions: int
    transaction_state_log_replication_factor: int
    transaction_state_log_min_isr: int
    transaction_state_log_segment_bytes: int
    transaction_max_timeout_ms: int
    transactional_id_expiration_ms: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int
    transaction_remove_expired_transaction_cleanup_interval_ms: int
    transaction_partition_verification_enable: bool
    replica_lag_time_max_ms: int
    replica_fetch_wait_max_ms: int
    replica_fetch_min_bytes: int
    replica_fetch_max_bytes: int
    replica_fetch_response_max_bytes: int
    replica_fetch_backoff_ms: int
    replica_socket_timeout_ms: int
    replica_high_watermark_checkpoint_interval_ms: int
    controller_socket_timeout_ms: int
    controlled_shutdown_enable: bool
    controlled_shutdown_max_retries: int
    controlled_shutdown_retry_backoff_ms: int
    quota_window_num: int
    quota_window_size_seconds: int
    inter_broker_protocol_version: str
    """A Kafka version (``2.0``, ``2.1-IV0`` ...): the group coordinator writes the
    ``__consumer_offsets`` record versions Kafka writes at it, and refuses static membership
    before 2.3 (its records cannot hold a group.instance.id)."""
    topic_defaults: Mapping[str, Any] = dataclasses.field(repr=False)
    """Typed topic-config defaults keyed by topic config name (``segment.bytes`` ...)."""
    given: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """The broker properties set (file and overrides, later ones win) as written: the
    STATIC_BROKER_CONFIG layer DescribeConfigs (and the console) report."""
    listener_given: Mapping[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """The ``listener.name.*`` and ``<mechanism>.sasl.jaas.config`` properties as written. Kept
    apart from ``given`` because JAAS configs hold passwords: never shown or logged."""
    listeners: tuple[security_settings.Listener, ...] = ()
    """Every listener (broker/security/settings.py); the first one's addresses are also
    ``host``/``port``/``advertised_host``/``advertised_port``."""
    security: security_settings.SecuritySettings = security_settings.SecuritySettings()
    """Authentication and authorization settings."""

    @classmethod
    def from_properties(cls, pairs: Iterable[tuple[str, str]]) -> BrokerConfig:
        """Validate broker properties (later pairs win) and derive the effective configuration.

        Raises ConfigError naming the first unknown or invalid key.
        """
        given: dict[str, Any] = {}
        raw_given: dict[str, str] = {}
        dynamic: dict[str, str] = {}  # listener.name.* and <mechanism>.sasl.jaas.config
        for name, raw in pairs:
            # validated and reported, not acted on (sasl.jaas.config is the listeners' to judge)
            if name in KAFKA_ONLY_BROKER_KEYS and not security_settings.is_dynamic_key(name):
                _parse(KAFKA_ONLY_BROKER_KEYS[name], name, raw)
                raw_given[name] = raw
                continue
            if name not in BROKER_KEYS:
                if not security_settings.is_dynamic_key(name):
                    raise ConfigError(name, "unknown broker property")
                dynamic[name] = raw  # not in raw_given: JAAS configs hold passwords
                continue
            given[name] = _parse(BROKER_KEYS[name], name, raw)
            raw_given[name] = raw
        v = {name: given.get(name, key.default) for name, key in BROKER_KEYS.items()}
        if v["group.min.session.timeout.ms"] > v["group.max.session.timeout.ms"]:
            raise ConfigError(
                "group.min.session.timeout.ms", "must not exceed group.max.session.timeout.ms"
            )
        _check_message_format(v)
        topic_defaults = {}
        for name, key in TOPIC_KEYS.items():
            synonym = next(s for s in key.synonyms if v[s.name] is not None)
            value = v[synonym.name] if synonym.unit == 1 else v[synonym.name] * synonym.unit
            topic_defaults[name] = key.validator(value) if key.validator else value
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {
            key.attribute: v[name] for name, key in BROKER_KEYS.items() if key.attribute in fields
        }
        try:
            listeners, security = security_settings.resolve(
                v, given, dynamic.items(), _parse_listener_key
            )
        except security_settings.SettingsError as exc:
            raise ConfigError(exc.key, exc.reason) from None
        first = listeners[0]
        values.pop("listeners")
        values.update(
            host=first.host,
            port=first.port,
            advertised_host=first.advertised_host,
            advertised_port=first.advertised_port,
            log_dirs=_log_dirs(v),
        )
        metrics = v["metrics.listener"]
        if metrics is not None and metrics[1] != 0 and metrics[1] in {l.port for l in listeners}:
            raise ConfigError("metrics.listener", f"port {metrics[1]} is a Kafka listener's")
        return cls(
            **values,
            topic_defaults=topic_defaults,
            given=raw_given,
            listener_given=dynamic,
            listeners=listeners,
            security=security,
        )

    def topic_config(self, overrides: Mapping[str, str] | None = None) -> TopicConfig:
        """The effective config of a topic with these (already validated) overrides."""
        return TopicConfig.resolve(self.topic_defaults, overrides or {})


def _check_message_format(v: Mapping[str, Any]) -> None:
    """Kafka's KafkaConfig check: log.message.format.version may not store a newer magic than
    inter.broker.protocol.version knows (a broker at IBP 0.10.x must also keep the 0.10 format)."""
    ibp = v["inter.broker.protocol.version"]
    magic = format_magic(v["log.message.format.version"])
    if magic > format_magic(ibp):
        raise ConfigError(
            "log.message.format.version",
            f"{v['log.message.format.version']} can only be used when "
            f"inter.broker.protocol.version is set to version {_MIN_VERSION_FOR_MAGIC[magic]} "
            f"or higher (it is {ibp}); set log.message.format.version to {ibp} as well",
        )


def _parse_listener_key(name: str, raw: str) -> Any:
    """A ``listener.name.<listener>.<key>`` value, typed as the broker property <key>."""
    return _parse(BROKER_KEYS[name.split(".", 3)[3]], name, raw)


def _log_dirs(v: Mapping[str, Any]) -> tuple[str, ...]:
    log_dirs = tuple(d.strip() for d in (v["log.dirs"] or v["log.dir"]).split(",") if d.strip())
    if not log_dirs:
        raise ConfigError("log.dirs", "no directory given")
    return log_dirs


def load_config(path: str | None, overrides: Iterable[str] = ()) -> BrokerConfig:
    """Read a properties file (optional) and ``key=value`` override strings into a BrokerConfig.

    Raises ConfigError for unknown or invalid keys, OSError when the file cannot be read.
    """
    pairs: list[tuple[str, str]] = []
    if path is not None:
        with open(path, encoding="utf-8") as f:
            pairs.extend(parse_properties(f.read()))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(item, "override must be of the form key=value")
        pairs.append((key.strip(), value.strip()))
    return BrokerConfig.from_properties(pairs)
