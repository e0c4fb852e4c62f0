"""Broker and topic configuration: Kafka's property names, parsed and validated.

Broker properties come from a Java-style ``.properties`` file plus ``key=value`` overrides and
use Kafka 0.10.1's broker names (``log.segment.bytes``, ``log.retention.hours``, ...). Topic
configs use Kafka's topic names (``segment.bytes``, ``retention.ms``, ...); the broker's ``log.*``
values are the defaults every topic starts from. Unknown keys and bad values raise
:class:`ConfigError` naming the key, never a bare ``ValueError``.

Deliberate departures from Kafka 0.10.1 (also in the README):
- ``max.message.time.difference.ms`` (KIP-32's name) is accepted as an alias of
  ``message.timestamp.difference.max.ms``.
- ``log.flush.scheduler.interval.ms`` defaults to 1000 instead of Long.MaxValue, so a topic's
  ``flush.ms`` takes effect without further tuning.
- ``segment.index.bytes`` must be at least 24 (two time-index entries), not 0: a smaller index is
  always full and would roll a segment on every append. Likewise ``segment.bytes`` >= 26 (one
  minimal entry), ``segment.ms`` >= 1 and ``flush.messages`` >= 1.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

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
# Value parsers: each takes the raw string and returns the value or raises ValueError(reason).

def _integer(lo: int, hi: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"{raw!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ValueError(f"{value} is out of range [{lo}, {hi}]")
        return value
    return parse


def _int(lo: int = -2**31) -> Callable[[str], int]:
    return _integer(lo, INT_MAX)


def _long(lo: int = -2**63) -> Callable[[str], int]:
    return _integer(lo, LONG_MAX)


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{raw!r} is not true or false")
    return value == "true"


def _choice(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise ValueError(f"{raw!r} is not one of {', '.join(choices)}")
        return value
    return parse


def _cleanup_policy(raw: str) -> str:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"{raw!r} is not a list of delete, compact")
    return ",".join(parts)


# message.format.version: Kafka's MetadataVersion names (server-common MetadataVersion.java at
# 3.9.0), each with its "-IVn" variants. Up to 0.9.0 store magic 0, 0.10.x magic 1 (KIP-32), 0.11.0
# and later magic 2 (record batches, KIP-98). Kafka 3.x ignores the setting for brokers at 3.0+;
# chronolog honours it, so a topic can still be held to an old format.
_IV_COUNTS = {
    "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3, "1.0": 1, "1.1": 1, "2.0": 2, "2.1": 3,
    "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2, "3.0": 2, "3.1": 1,
    "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}
_FORMAT_VERSIONS = {"0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0}
for _short, _count in _IV_COUNTS.items():
    _magic = 1 if _short.startswith("0.10.") else 2
    _FORMAT_VERSIONS[_short] = _magic
    _FORMAT_VERSIONS.update({f"{_short}-IV{n}": _magic for n in range(_count)})
DEFAULT_FORMAT_VERSION = "3.0-IV1"  # Kafka 3.9's default: record batches (magic 2)


def _format_version(raw: str) -> str:
    value = raw.strip()
    if value in _FORMAT_VERSIONS:
        return value
    # Kafka accepts full release numbers (0.10.1.0, 0.9.0.1, 2.8.1) by their short version.
    parts = value.split(".")
    short = ".".join(parts[:3] if parts[0] == "0" else parts[:2])
    rest = parts[3:] if parts[0] == "0" else parts[2:]
    if short in _FORMAT_VERSIONS and len(rest) == 1 and rest[0].isdigit():
        return short
    raise ValueError(f"{raw!r} is not a message format version (0.8.0 ... 3.9)")


def format_magic(version: str) -> int:
    """The message magic (0, 1 or 2) a message.format.version stores."""
    return _FORMAT_VERSIONS[version]


def _listener(raw: str) -> tuple[str, int]:
    value = raw.strip()
    if "," in value:
        raise ValueError(f"{raw!r} lists several listeners; only one PLAINTEXT listener is supported")
    m = re.fullmatch(r"(?:PLAINTEXT://)?\[?([^\]\s]*?)\]?:(\d+)", value)
    if not m:
        raise ValueError(f"{raw!r} is not of the form PLAINTEXT://host:port")
    port = int(m.group(2))
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} is out of range [0, 65535]")
    return m.group(1), port


def _string(raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ValueError("value is empty")
    return value


# ---------------------------------------------------------------------------------------------
# Topic configs (LogConfig.scala names and defaults).

@dataclass(frozen=True)
class _Key:
    name: str
    parse: Callable[[str], Any]
    default: Any


TOPIC_KEYS: dict[str, _Key] = {k.name: k for k in [
    _Key("cleanup.policy", _cleanup_policy, "delete"),
    _Key("compression.type", _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer"),
    _Key("file.delete.delay.ms", _long(0), 60000),
    _Key("flush.messages", _long(1), LONG_MAX),
    _Key("flush.ms", _long(0), LONG_MAX),
    _Key("index.interval.bytes", _int(0), 4096),
    _Key("max.message.bytes", _int(0), 1000012),
    _Key("message.format.version", _format_version, DEFAULT_FORMAT_VERSION),
    _Key("message.timestamp.after.max.ms", _long(0), LONG_MAX),
    _Key("message.timestamp.before.max.ms", _long(0), LONG_MAX),
    _Key("message.timestamp.difference.max.ms", _long(0), LONG_MAX),
    _Key("message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime"),
    _Key("retention.bytes", _long(), -1),
    _Key("retention.ms", _long(), 604800000),
    _Key("segment.bytes", _int(26), 1073741824),
    _Key("segment.index.bytes", _int(24), 10485760),
    _Key("segment.jitter.ms", _long(0), 0),
    _Key("segment.ms", _long(1), 604800000),
]}

TOPIC_ALIASES = {"max.message.time.difference.ms": "message.timestamp.difference.max.ms"}


def parse_topic_configs(entries: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """Validate topic config overrides; return them normalised (canonical names, stripped values).

    Raises ConfigError for an unknown name, a bad value, a null value, or a key given twice.
    """
    items = entries.items() if isinstance(entries, Mapping) else entries
    result: dict[str, str] = {}
    for raw_name, raw_value in items:
        name = TOPIC_ALIASES.get(raw_name, raw_name)
        key = TOPIC_KEYS.get(name)
        if key is None:
            raise ConfigError(raw_name, "unknown topic config")
        if raw_value is None:
            raise ConfigError(raw_name, "value is null")
        if name in result:
            raise ConfigError(raw_name, "given more than once")
        try:
            value = key.parse(raw_value)
        except ValueError as exc:
            raise ConfigError(raw_name, str(exc)) from None
        result[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return result


@dataclass(frozen=True)
class TopicConfig:
    """The effective configuration of one topic: broker defaults with the topic's overrides."""

    cleanup_policy: str
    compression_type: str
    file_delete_delay_ms: int
    flush_messages: int
    flush_ms: int
    index_interval_bytes: int
    max_message_bytes: int
    message_format_version: str
    message_timestamp_after_max_ms: int
    message_timestamp_before_max_ms: int
    message_timestamp_difference_max_ms: int
    message_timestamp_type: str
    retention_bytes: int
    retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    segment_jitter_ms: int
    segment_ms: int

    @property
    def magic(self) -> int:
        return format_magic(self.message_format_version)

    @classmethod
    def resolve(cls, defaults: Mapping[str, Any], overrides: Mapping[str, str]) -> "TopicConfig":
        """Topic config from typed broker defaults (by topic key name) and validated overrides."""
        values = dict(defaults)
        for name, raw in overrides.items():
            values[name] = TOPIC_KEYS[name].parse(raw)
        config = cls(**{name.replace(".", "_"): values[name] for name in TOPIC_KEYS})
        if config.compression_type == "zstd" and config.magic < 2:
            raise ConfigError("compression.type", "zstd needs message.format.version 0.11.0 or "
                                                  "later (record batches, KIP-110)")
        return config


# ---------------------------------------------------------------------------------------------
# Broker properties (KafkaConfig.scala names).

_NULL = None  # default of an optional property that falls back to another one

BROKER_KEYS: dict[str, _Key] = {k.name: k for k in [
    _Key("listeners", _listener, ("", 9092)),
    _Key("advertised.listeners", _listener, _NULL),
    _Key("broker.id", _int(0), 0),
    _Key("log.dirs", _string, _NULL),
    _Key("log.dir", _string, "/tmp/kafka-logs"),
    _Key("num.partitions", _int(1), 1),
    _Key("auto.create.topics.enable", _bool, True),
    _Key("log.segment.bytes", _int(26), 1073741824),
    _Key("log.roll.ms", _long(1), _NULL),
    _Key("log.roll.hours", _int(1), 168),
    _Key("log.roll.jitter.ms", _long(0), _NULL),
    _Key("log.roll.jitter.hours", _int(0), 0),
    _Key("log.retention.ms", _long(), _NULL),
    _Key("log.retention.minutes", _int(), _NULL),
    _Key("log.retention.hours", _int(), 168),
    _Key("log.retention.bytes", _long(), -1),
    _Key("log.retention.check.interval.ms", _long(1), 300000),
    _Key("log.index.interval.bytes", _int(0), 4096),
    _Key("log.index.size.max.bytes", _int(24), 10485760),
    _Key("log.message.timestamp.type", _choice("CreateTime", "LogAppendTime"), "CreateTime"),
    _Key("log.message.timestamp.difference.max.ms", _long(0), LONG_MAX),
    _Key("log.message.timestamp.before.max.ms", _long(0), LONG_MAX),
    _Key("log.message.timestamp.after.max.ms", _long(0), LONG_MAX),
    _Key("log.message.format.version", _format_version, DEFAULT_FORMAT_VERSION),
    _Key("log.cleanup.policy", _cleanup_policy, "delete"),
    _Key("compression.type", _choice("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"), "producer"),
    _Key("message.max.bytes", _int(0), 1000012),
    _Key("log.flush.interval.messages", _long(1), LONG_MAX),
    _Key("log.flush.interval.ms", _long(0), _NULL),
    _Key("log.flush.scheduler.interval.ms", _long(1), 1000),
    _Key("log.flush.offset.checkpoint.interval.ms", _int(0), 60000),
    _Key("log.segment.delete.delay.ms", _long(0), 60000),
    _Key("socket.request.max.bytes", _int(1), 104857600),
    _Key("max.connections", _int(1), INT_MAX),
    _Key("connections.max.idle.ms", _long(1), 600000),
    _Key("offset.metadata.max.bytes", _int(0), 4096),
    _Key("offsets.retention.minutes", _int(1), 1440),
    _Key("offsets.retention.check.interval.ms", _long(1), 600000),
    _Key("group.min.session.timeout.ms", _int(), 6000),
    _Key("group.max.session.timeout.ms", _int(), 300000),
    _Key("max.incremental.fetch.session.cache.slots", _int(0), 1000),
]}


def parse_properties(text: str) -> list[tuple[str, str]]:
    """Parse Java ``.properties`` text into (key, value) pairs in file order.

    Supports ``#``/``!`` comments, ``=``, ``:`` or whitespace separators, backslash line
    continuation and backslash escapes (``\\t``, ``\\n``, ``\\uXXXX``, escaped separators).
    """
    pairs: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # Join continuation lines: an odd number of trailing backslashes continues the line.
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1 and i <= len(lines):
            line = line[:-1] + (lines[i].lstrip() if i < len(lines) else "")
            i += 1
        key, value = _split_property(line)
        pairs.append((key, value))
    return pairs


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", s[i + 2:i + 6]):
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(n, n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _split_property(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key = line[:i]
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest).strip()


@dataclass(frozen=True)
class BrokerConfig:
    """Validated broker configuration. Build it with :meth:`from_properties`."""

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
    connections_max_idle_ms: int
    offset_metadata_max_bytes: int
    offsets_retention_minutes: int
    offsets_retention_check_interval_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    max_incremental_fetch_session_cache_slots: int
    topic_defaults: Mapping[str, Any] = field(repr=False)
    """Typed topic-config defaults keyed by topic config name (``segment.bytes`` ...)."""
    properties: Mapping[str, str] = field(repr=False)
    """Every property as given (after overrides), for components with their own keys."""

    @classmethod
    def from_properties(cls, pairs: Iterable[tuple[str, str]]) -> "BrokerConfig":
        """Validate broker properties (later pairs win) and derive the effective configuration.

        Raises ConfigError naming the first unknown or invalid key.
        """
        raw: dict[str, str] = {}
        for key, value in pairs:
            if key not in BROKER_KEYS:
                raise ConfigError(key, "unknown broker property")
            raw[key] = value
        v: dict[str, Any] = {}
        for name, key in BROKER_KEYS.items():
            if name in raw:
                try:
                    v[name] = key.parse(raw[name])
                except ValueError as exc:
                    raise ConfigError(name, str(exc)) from None
            else:
                v[name] = key.default

        host, port = v["listeners"]
        adv_host, adv_port = v["advertised.listeners"] or (host, port)
        if adv_host in ("", "0.0.0.0", "::"):
            if "advertised.listeners" in raw:
                raise ConfigError("advertised.listeners", "must name a host clients can reach")
            import socket
            adv_host = socket.getfqdn()
        if v["advertised.listeners"] is not None and adv_port == 0:
            raise ConfigError("advertised.listeners", "port 0 cannot be advertised")
        log_dirs = tuple(d.strip() for d in (v["log.dirs"] or v["log.dir"]).split(",") if d.strip())
        if not log_dirs:
            raise ConfigError("log.dirs", "no directory given")

        def first(*names: str, scale: tuple[int, ...]) -> int:
            for name, factor in zip(names, scale):
                if v[name] is not None:
                    return v[name] * factor
            raise AssertionError(names)

        hour, minute = 3600 * 1000, 60 * 1000
        retention_ms = first("log.retention.ms", "log.retention.minutes", "log.retention.hours",
                             scale=(1, minute, hour))
        defaults = {
            "cleanup.policy": v["log.cleanup.policy"],
            "compression.type": v["compression.type"],
            "file.delete.delay.ms": v["log.segment.delete.delay.ms"],
            "flush.messages": v["log.flush.interval.messages"],
            "flush.ms": (v["log.flush.interval.ms"] if v["log.flush.interval.ms"] is not None
                         else LONG_MAX),
            "index.interval.bytes": v["log.index.interval.bytes"],
            "max.message.bytes": v["message.max.bytes"],
            "message.format.version": v["log.message.format.version"],
            "message.timestamp.after.max.ms": v["log.message.timestamp.after.max.ms"],
            "message.timestamp.before.max.ms": v["log.message.timestamp.before.max.ms"],
            "message.timestamp.difference.max.ms": v["log.message.timestamp.difference.max.ms"],
            "message.timestamp.type": v["log.message.timestamp.type"],
            "retention.bytes": v["log.retention.bytes"],
            "retention.ms": retention_ms if retention_ms >= 0 else -1,
            "segment.bytes": v["log.segment.bytes"],
            "segment.index.bytes": v["log.index.size.max.bytes"],
            "segment.jitter.ms": first("log.roll.jitter.ms", "log.roll.jitter.hours",
                                       scale=(1, hour)),
            "segment.ms": first("log.roll.ms", "log.roll.hours", scale=(1, hour)),
        }
        if v["group.min.session.timeout.ms"] > v["group.max.session.timeout.ms"]:
            raise ConfigError("group.min.session.timeout.ms",
                              "must not exceed group.max.session.timeout.ms")
        return cls(
            host=host, port=port, advertised_host=adv_host, advertised_port=adv_port,
            broker_id=v["broker.id"], log_dirs=log_dirs,
            num_partitions=v["num.partitions"],
            auto_create_topics_enable=v["auto.create.topics.enable"],
            log_retention_check_interval_ms=v["log.retention.check.interval.ms"],
            log_flush_scheduler_interval_ms=v["log.flush.scheduler.interval.ms"],
            log_flush_offset_checkpoint_interval_ms=v["log.flush.offset.checkpoint.interval.ms"],
            socket_request_max_bytes=v["socket.request.max.bytes"],
            max_connections=v["max.connections"],
            connections_max_idle_ms=v["connections.max.idle.ms"],
            offset_metadata_max_bytes=v["offset.metadata.max.bytes"],
            offsets_retention_minutes=v["offsets.retention.minutes"],
            offsets_retention_check_interval_ms=v["offsets.retention.check.interval.ms"],
            group_min_session_timeout_ms=v["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=v["group.max.session.timeout.ms"],
            max_incremental_fetch_session_cache_slots=v[
                "max.incremental.fetch.session.cache.slots"],
            topic_defaults=defaults, properties=dict(raw),
        )

    def topic_config(self, overrides: Mapping[str, str] | None = None) -> TopicConfig:
        """The effective config of a topic with these (already validated) overrides."""
        return TopicConfig.resolve(self.topic_defaults, overrides or {})


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
