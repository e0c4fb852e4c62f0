"""Configs as Kafka 3.9's DescribeConfigs reports them: values, sources, synonyms, read-only and
sensitive flags (apache/kafka ConfigHelper.scala and DynamicBrokerConfig.scala at 3.9.0).

A broker property's value comes from the first of four layers that sets it: the dynamic
per-broker configs (DYNAMIC_BROKER_CONFIG), the dynamic cluster-wide defaults
(DYNAMIC_DEFAULT_BROKER_CONFIG), the properties the broker started with (STATIC_BROKER_CONFIG)
and the defaults of :data:`broker.config.KEYS` (DEFAULT_CONFIG). A topic config comes from the
topic's override (TOPIC_CONFIG), else from its broker synonyms (``retention.ms`` from
``log.retention.ms``, ``log.retention.minutes``, ``log.retention.hours``), in those layers.

Synonyms are listed as Kafka lists them: every layer in precedence order, each with the names of
the synonym group in order, then cut before the first entry of the property itself (Kafka's
``dropWhile(_.name != name)``): so a topic's ``retention.ms`` whose default comes from
``log.retention.hours`` reports no synonyms and source DEFAULT_CONFIG, exactly as Kafka does.

Dynamic broker properties (read_only false) are Kafka's: the first broker synonym of every topic
config but ``message.format.version`` (DynamicLogConfig), the socket server's
``max.connections`` and the log cleaner's reconfigurable properties, of those chronolog has.

Every other broker property and topic config Kafka 4.1 defines (broker/admin/kafka_configs.py,
generated from Kafka's definitions) is reported too, with Kafka's default, type and synonyms;
chronolog stores what is set for them but does not act on it (docs/operations.md lists them), and
those Kafka can change at run time (:data:`ACCEPTED_DYNAMIC_KEYS`) are read_only false.
Pure functions and frozen data: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.config import (
    BROKER_KEYS,
    BROKER_UPDATE_MODES,
    KAFKA_ONLY_BROKER_KEYS,
    KAFKA_ONLY_TOPIC_KEYS,
    TOPIC_KEYS,
    ConfigKey,
    TopicConfig,
    Type,
)
from broker.admin.kafka_configs import BROKER_QUOTAS

__all__ = [
    "ConfigSource",
    "ConfigType",
    "ResourceType",
    "Synonym",
    "ConfigEntry",
    "BrokerLayers",
    "DYNAMIC_BROKER_KEYS",
    "ACCEPTED_DYNAMIC_KEYS",
    "topic_entries",
    "broker_entries",
    "value_string",
]


class ConfigSource(enum.IntEnum):
    """DescribeConfigsResponse.ConfigSource ids."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """DescribeConfigsResponse.ConfigType ids (DescribeConfigs v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ResourceType(enum.IntEnum):
    """ConfigResource.Type ids."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16


# Kafka's reconfigurable properties that are not topic-config synonyms: SocketServer's,
# LogCleaner's (message.max.bytes is both a cleaner and a topic synonym), the request handler
# pool's size (num.io.threads) and the quota on moves between log dirs (per broker only).
_OTHER_DYNAMIC = frozenset(
    {
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.backoff.ms",
        "num.io.threads",
        "replica.alter.log.dirs.io.max.bytes.per.second",
    }
)

DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(
    name
    for name in (
        {k.synonyms[0].name for k in TOPIC_KEYS.values() if k.name != "message.format.version"}
        | _OTHER_DYNAMIC
    )
    if name in BROKER_KEYS
)
"""The broker properties AlterConfigs may change at run time (cluster-wide in Kafka but those
its update mode says are per broker)."""

ACCEPTED_DYNAMIC_KEYS: frozenset[str] = frozenset(
    name
    for name in KAFKA_ONLY_BROKER_KEYS
    if BROKER_UPDATE_MODES[name] in ("per-broker", "cluster-wide")
)
"""Kafka's dynamic broker properties that chronolog does not act on: AlterConfigs stores them
(per broker only where Kafka says so) and DescribeConfigs reports them."""

# broker property -> the synonym group it belongs to (DynamicBrokerConfig.brokerConfigSynonyms)
_GROUPS: dict[str, tuple[str, ...]] = {
    s.name: tuple(t.name for t in key.synonyms)
    for key in (*TOPIC_KEYS.values(), *KAFKA_ONLY_TOPIC_KEYS.values())
    for s in key.synonyms
}


@dataclass(frozen=True)
class Synonym:
    """One place a config's value may come from."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One config as DescribeConfigs (and CreateTopics v5+) report it."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    synonyms: tuple[Synonym, ...]

    def describe_result(self, include_synonyms: bool) -> dict[str, Any]:
        """The DescribeConfigsResourceResult (``is_default`` is what v0 readers look at)."""
        return {
            "name": self.name,
            "value": self.value,
            "read_only": self.read_only,
            "is_default": self.source == ConfigSource.DEFAULT_CONFIG,
            "config_source": int(self.source),
            "is_sensitive": self.sensitive,
            "synonyms": [
                {"name": s.name, "value": s.value, "source": int(s.source)}
                for s in (self.synonyms if include_synonyms else ())
            ],
            "config_type": int(self.type),
            "documentation": None,
        }

    def created_topic_config(self) -> dict[str, Any]:
        """The CreatableTopicConfigs entry of a CreateTopics v5+ answer."""
        return {
            "name": self.name,
            "value": self.value,
            "read_only": self.read_only,
            "config_source": int(self.source),
            "is_sensitive": self.sensitive,
        }


def _config_type(key: ConfigKey) -> ConfigType:
    """Kafka's type id of a key, by the name of broker.config's Type (INT, LONG, LIST, ...)."""
    return ConfigType.__members__.get(key.type.name, ConfigType.UNKNOWN)


def _sensitive(key: ConfigKey) -> bool:
    # Kafka's KafkaConfig.maybeSensitive: passwords (the ssl.*.password keys).
    return _config_type(key) == ConfigType.PASSWORD


def value_string(key: ConfigKey, value: Any) -> str | None:
    """A typed or raw value as Kafka's ConfigDef.convertToString writes it (None stays None;
    booleans lower case; integers normalised; strings as given)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and key.type in (Type.INT, Type.LONG, Type.BOOLEAN):
        try:
            return value_string(key, key.parse(value))
        except ValueError:
            return value
    if isinstance(value, tuple):  # a parsed listener (host, port)
        host, port = value
        return f"PLAINTEXT://{f'[{host}]' if ':' in host else host}:{port}"
    return str(value)


def _key(name: str) -> ConfigKey:
    """The key of a broker property in the layers (DynamicConfigs.validate let only known ones
    in)."""
    return KAFKA_ONLY_BROKER_KEYS.get(name) or BROKER_KEYS[name]


@dataclass(frozen=True)
class BrokerLayers:
    """The raw broker property values of each layer, highest precedence first."""

    per_broker: Mapping[str, str]
    cluster_default: Mapping[str, str]
    static: Mapping[str, str]

    def _layers(self) -> list[tuple[Mapping[str, str], ConfigSource]]:
        return [
            (self.per_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
            (self.cluster_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self.static, ConfigSource.STATIC_BROKER_CONFIG),
        ]

    def synonyms(self, name: str) -> list[Synonym]:
        """Kafka's ConfigHelper.configSynonyms for broker property ``name``: every layer (then
        the defaults), the names of its synonym group in order, cut before ``name``'s first."""
        group = _GROUPS.get(name, (name,))
        found = []
        for values, source in self._layers():
            for member in group:
                if member in values:
                    found.append(
                        Synonym(member, value_string(_key(member), values[member]), source)
                    )
        for member in group:
            default = value_string(_key(member), _key(member).default)
            if default is not None:
                found.append(Synonym(member, default, ConfigSource.DEFAULT_CONFIG))
        while found and found[0].name != name:
            found.pop(0)
        return found

    def value(self, name: str) -> str | None:
        """The effective raw value of broker property ``name`` itself (not its synonyms)."""
        key = _key(name)
        for values, _ in self._layers():
            if name in values:
                return value_string(key, values[name])
        return value_string(key, key.default)


def _entry(
    key: ConfigKey, name: str, value: str | None, synonyms: list[Synonym], read_only: bool
) -> ConfigEntry:
    sensitive = _sensitive(key)
    if sensitive:
        value = None
        synonyms = [Synonym(s.name, None, s.source) for s in synonyms]
    return ConfigEntry(
        name,
        value,
        synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
        read_only,
        sensitive,
        _config_type(key),
        tuple(synonyms),
    )


def topic_entries(
    overrides: Mapping[str, str], config: TopicConfig, layers: BrokerLayers
) -> list[ConfigEntry]:
    """Every topic config of a topic with these (normalised) overrides and effective config,
    sorted by name (ConfigHelper.createTopicConfigEntry)."""
    entries = []
    for name, key in sorted({**TOPIC_KEYS, **KAFKA_ONLY_TOPIC_KEYS}.items()):
        synonyms = layers.synonyms(key.synonyms[0].name) if key.synonyms else []
        if name in TOPIC_KEYS:
            value = value_string(key, getattr(config, key.attribute))
        elif name in overrides:
            value = value_string(key, overrides[name])
        else:  # a name Kafka defines and chronolog does not act on: as the broker sets it
            value = synonyms[0].value if synonyms else value_string(key, key.default)
        if name in overrides:
            synonyms.insert(0, Synonym(name, value, ConfigSource.TOPIC_CONFIG))
        entries.append(_entry(key, name, value, synonyms, read_only=False))
    return entries


def broker_entries(layers: BrokerLayers, *, per_broker: bool) -> list[ConfigEntry]:
    """The broker's properties sorted by name: every one (``per_broker``: a broker id was named),
    or only the dynamic cluster-wide defaults set (an empty resource name), whose synonyms are
    then only the other cluster-wide defaults (ConfigHelper.createBrokerConfigEntry)."""
    if per_broker:  # the quotas only when set, as they are no KafkaConfig property
        names = sorted(
            n
            for n in (*BROKER_KEYS, *KAFKA_ONLY_BROKER_KEYS)
            if n not in BROKER_QUOTAS or n in layers.per_broker
        )
    else:
        names = sorted(layers.cluster_default)
    entries = []
    for name in names:
        key = _key(name)
        synonyms = layers.synonyms(name)
        if not per_broker:
            synonyms = [
                s for s in synonyms if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            ]
        value = (
            layers.value(name) if per_broker else value_string(key, layers.cluster_default[name])
        )
        read_only = name not in DYNAMIC_BROKER_KEYS and name not in ACCEPTED_DYNAMIC_KEYS
        entries.append(_entry(key, name, value, synonyms, read_only=read_only))
    return entries
