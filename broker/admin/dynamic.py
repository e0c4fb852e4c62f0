"""The broker's dynamic configs (KIP-226): cluster-wide defaults and this broker's own values of
the properties Kafka lets AlterConfigs change at run time (:data:`DYNAMIC_BROKER_KEYS`).

A single broker persists them as JSON in ``<first log dir>/chronolog-broker-configs.json``
(``{"version": 1, "cluster_default": {...}, "brokers": {"<broker id>": {...}}}``), replaced
atomically (tmp file, fsync, rename, directory fsync), so a crash leaves the old or the new file,
never a torn one. At start-up they are laid over the static properties before any topic or log
is loaded, so the effective configuration is the same after a restart as before it. A broker in
a cluster keeps them in ZooKeeper instead (``/config/brokers/<default>`` and
``/config/brokers/<id>``, as Kafka; broker/cluster/config_changes.py) and adopts them with
:meth:`DynamicConfigs.adopt_stored`.

Not thread-safe: the broker changes it on the trio thread under its admin lock and runs the file
write in a worker thread.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

import structlog

from broker.admin.configs import ACCEPTED_DYNAMIC_KEYS, DYNAMIC_BROKER_KEYS, BrokerLayers
from broker.config import (
    BROKER_KEYS,
    BROKER_UPDATE_MODES,
    BrokerConfig,
    ConfigError,
    broker_key,
)
from broker.errors import StartupError
from storage.durable import write_atomically

logger = structlog.get_logger(__name__)

DYNAMIC_CONFIG_FILE = "chronolog-broker-configs.json"


class NotDynamicError(Exception):
    """Raised by :meth:`DynamicConfigs.validate` for properties that cannot change while the
    broker runs (Kafka answers INVALID_REQUEST "Cannot update these configs dynamically")."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(
            f"Cannot update these configs dynamically: {', '.join(names)}; set them in "
            "server.properties and restart the broker"
        )
        self.names = names


class PerBrokerOnlyError(NotDynamicError):
    """Raised by :meth:`DynamicConfigs.validate` for properties Kafka changes only for one
    broker, given as cluster-wide defaults (Kafka answers INVALID_REQUEST)."""

    def __init__(self, names: list[str]) -> None:
        Exception.__init__(
            self,
            "Cannot update these configs at default cluster level, broker id must be "
            f"specified: {', '.join(names)}",
        )
        self.names = names


class PerListenerOnlyError(NotDynamicError):
    """Raised by :meth:`DynamicConfigs.validate` for the key and trust store properties given
    without a listener prefix (Kafka answers INVALID_REQUEST)."""

    def __init__(self, names: list[str]) -> None:
        Exception.__init__(
            self,
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {', '.join(names)}",
        )
        self.names = names


class DynamicConfigs:
    """The dynamic layers of one broker's configuration; see the module docstring."""

    def __init__(self, static: BrokerConfig) -> None:
        self.static = static
        self.path = os.path.join(static.log_dirs[0], DYNAMIC_CONFIG_FILE)
        self.cluster_default: dict[str, str] = {}
        self.per_broker: dict[str, str] = {}

    def load(self) -> None:
        """Read the file (absent: nothing dynamic). Raises StartupError when it is unreadable or
        holds values that no longer validate."""
        try:
            with open(self.path, "rb") as f:
                doc = json.loads(f.read())
            cluster_default = dict(doc.get("cluster_default", {}))
            per_broker = dict(doc.get("brokers", {}).get(str(self.static.broker_id), {}))
        except FileNotFoundError:
            return
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise StartupError(
                f"cannot read dynamic broker configs {self.path}: {exc}; restore it from a "
                "backup, or remove it to fall back to server.properties"
            ) from exc
        try:
            self.cluster_default = self.validate(cluster_default, per_broker=False)
            self.per_broker = self.validate(per_broker, per_broker=True)
            self.effective(self.static)
        except (ConfigError, NotDynamicError) as exc:
            raise StartupError(
                f"dynamic broker configs {self.path}: {exc}; fix or remove the entry"
            ) from exc

    def adopt_stored(
        self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str], source: str
    ) -> BrokerConfig:
        """At a cluster broker's start: take the layers stored at ``source`` (ZooKeeper) and
        return the static config with them laid over. Like Kafka's DynamicBrokerConfig, what
        does not validate is left out with an error logged, rather than stopping the broker:
        the layers are shared and a broker that does not start could not fix them."""
        self.cluster_default = self.usable(cluster_default, per_broker=False)
        self.per_broker = self.usable(per_broker, per_broker=True)
        try:
            return self.effective(self.static)
        except ConfigError as exc:
            logger.error(
                "dynamic broker configs do not combine with server.properties; ignoring them",
                source=source,
                error=str(exc),
                action="fix them with kafka-configs.sh or chronolog configs",
            )
            self.cluster_default, self.per_broker = {}, {}
            return self.static

    def usable(self, values: Mapping[str, str], *, per_broker: bool) -> dict[str, str]:
        """``values`` read from a shared store, validated (:meth:`validate`) without the
        entries that do not pass, each logged."""
        kept: dict[str, str] = {}
        for name, raw in values.items():
            try:
                kept.update(self.validate({name: raw}, per_broker=per_broker))
            except (ConfigError, NotDynamicError) as exc:
                logger.error(
                    "ignoring a stored dynamic broker config",
                    config=name,
                    level="broker" if per_broker else "cluster-wide default",
                    reason=str(exc),
                    action="fix or delete it with kafka-configs.sh or chronolog configs",
                )
        return kept

    def layers(
        self,
        cluster_default: Mapping[str, str] | None = None,
        per_broker: Mapping[str, str] | None = None,
    ) -> BrokerLayers:
        """The layers DescribeConfigs reports (optionally with a proposed dynamic layer)."""
        return BrokerLayers(
            self.per_broker if per_broker is None else per_broker,
            self.cluster_default if cluster_default is None else cluster_default,
            self.static.given,
        )

    @staticmethod
    def validate(values: Mapping[str, str], *, per_broker: bool) -> dict[str, str]:
        """Check one dynamic layer: every name a known dynamic property, every value valid.
        Returns it with values stripped. Raises NotDynamicError (names the properties that are
        not dynamic) or ConfigError (unknown name or invalid value, naming the key)."""
        keys = {name: broker_key(name) for name in values}
        unknown = [name for name, key in keys.items() if key is None]
        if unknown:
            raise ConfigError(unknown[0], "unknown broker config")
        modes = {name: BROKER_UPDATE_MODES.get(name) for name in values}
        fixed = sorted(
            name
            for name in values
            if name not in DYNAMIC_BROKER_KEYS
            and name not in ACCEPTED_DYNAMIC_KEYS
            and modes[name] != "per-listener"
        )
        if fixed:
            raise NotDynamicError(fixed)
        listener_only = sorted(name for name in values if modes[name] == "per-listener")
        if listener_only:  # chronolog cannot reload stores: a listener prefix is unknown here
            raise PerListenerOnlyError(listener_only)
        result = {}
        for name, raw in values.items():
            try:
                keys[name].parse(raw)  # type: ignore[union-attr]
            except ValueError as exc:
                raise ConfigError(name, f"invalid value {raw!r}: {exc}") from None
            result[name] = raw.strip()
        broker_only = sorted(name for name in values if modes[name] == "per-broker")
        if broker_only and not per_broker:
            raise PerBrokerOnlyError(broker_only)
        return result

    def effective(
        self,
        current: BrokerConfig,
        cluster_default: Mapping[str, str] | None = None,
        per_broker: Mapping[str, str] | None = None,
    ) -> BrokerConfig:
        """``current`` with the dynamic properties taken from the layers (the stored ones, or
        the proposed ones given); raises ConfigError when the combination does not validate.
        Everything not dynamic (listeners, the advertised port chosen at start-up) is kept."""
        layers = self.layers(cluster_default, per_broker)
        merged = BrokerConfig.from_properties(
            [
                *self.static.given.items(),
                *self.static.listener_given.items(),
                *layers.cluster_default.items(),
                *layers.per_broker.items(),
            ]
        )
        fields = {f.name for f in dataclasses.fields(BrokerConfig)}
        changes = {
            BROKER_KEYS[name].attribute: getattr(merged, BROKER_KEYS[name].attribute)
            for name in DYNAMIC_BROKER_KEYS
            if BROKER_KEYS[name].attribute in fields
        }
        return dataclasses.replace(current, topic_defaults=merged.topic_defaults, **changes)

    def snapshot(self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> bytes:
        """The file contents for these layers (other brokers' entries are not kept: chronolog
        is a single broker)."""
        doc = {
            "version": 1,
            "cluster_default": dict(cluster_default),
            "brokers": {str(self.static.broker_id): dict(per_broker)} if per_broker else {},
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    def save(self, snapshot: bytes) -> None:
        """Write a snapshot durably (blocking: run it in a worker thread)."""
        write_atomically(self.path, snapshot)

    def replace(self, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]) -> None:
        """Adopt saved layers in memory."""
        self.cluster_default = dict(cluster_default)
        self.per_broker = dict(per_broker)
