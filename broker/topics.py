"""The topic registry: which topics exist, their ids, partition counts and config overrides.

Every topic has a KIP-516 topic id (a random UUID, made when the topic is created and kept for
its lifetime; topics registered before ids existed get one at the next start).

Persisted as JSON in ``<first log dir>/chronolog-topics.json``; every change is written to a
``.tmp`` file, fsynced, renamed over the old file and the directory fsynced, so a crash leaves
either the old or the new registry, never a torn one.

Not thread-safe: the broker mutates it from the trio thread only (under its admin lock) and runs
the file writes in a worker thread.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import structlog

from broker.config import BrokerConfig, ConfigError, TopicConfig, parse_topic_configs
from broker.errors import StartupError
from protocol.records import TimestampType
from protocol.validator import TopicSettings
from storage import LogConfig
from storage.durable import write_atomically

logger = structlog.get_logger(__name__)

REGISTRY_FILE = "chronolog-topics.json"


@dataclass(frozen=True)
class Topic:
    """One topic: its partition count, its overrides as given, and the derived settings."""

    name: str
    partitions: int
    overrides: Mapping[str, str]
    config: TopicConfig
    topic_id: uuid.UUID

    @cached_property
    def log_config(self) -> LogConfig:
        return self.config.log_config()

    @cached_property
    def settings(self) -> TopicSettings:
        return self.config.validator_settings()

    @cached_property
    def log_append_time(self) -> bool:
        """Whether the broker stamps appends (message.timestamp.type=LogAppendTime)."""
        return self.settings.timestamp_type == TimestampType.LOG_APPEND_TIME


class TopicRegistry:
    """In-memory map of topics backed by the registry file; see the module docstring."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._path = os.path.join(config.log_dirs[0], REGISTRY_FILE)
        self._topics: dict[str, Topic] = {}
        self._ids: dict[uuid.UUID, Topic] | None = None  # rebuilt after every change
        # True when load() gave ids to topics registered before ids existed: save the registry.
        self.ids_assigned = False

    def load(self) -> None:
        """Read the registry file (absent = no topics). Raises StartupError when it is unreadable
        or holds configs that no longer validate."""
        try:
            with open(self._path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            raise StartupError(
                f"cannot read topic registry {self._path}: {exc}; "
                "restore it from a backup or remove it to fall back to defaults"
            ) from exc
        for name, entry in doc.get("topics", {}).items():
            try:
                topic_id = entry.get("topic_id")
                self._topics[name] = self.make_topic(
                    name,
                    int(entry["partitions"]),
                    entry.get("configs", {}),
                    topic_id=None if topic_id is None else topic_id_from_string(topic_id),
                )
            except (ConfigError, KeyError, TypeError, ValueError) as exc:
                raise StartupError(f"topic registry {self._path}: topic {name!r}: {exc}") from exc
            self.ids_assigned = self.ids_assigned or topic_id is None

    def make_topic(
        self,
        name: str,
        partitions: int,
        overrides: Mapping[str, str],
        *,
        topic_id: uuid.UUID | None = None,
    ) -> Topic:
        """Validate overrides (ConfigError) and build a Topic without registering it; a new
        topic id is made unless one is given."""
        normalised = parse_topic_configs(overrides)
        return Topic(
            name,
            partitions,
            normalised,
            self._config.topic_config(normalised),
            topic_id or new_topic_id(),
        )

    def rebuilt(self, config: BrokerConfig) -> dict[str, Topic]:
        """Every topic re-resolved against ``config``'s defaults, not registered (a dynamic
        broker config change). Raises ConfigError naming the topic whose overrides no longer
        combine with the new defaults."""
        topics = {}
        for name, t in self._topics.items():
            try:
                resolved = config.topic_config(t.overrides)
            except ConfigError as exc:
                raise ConfigError(exc.key, f"{exc.reason} (for topic {name!r})") from None
            topics[name] = Topic(name, t.partitions, t.overrides, resolved, t.topic_id)
        return topics

    def use_config(self, config: BrokerConfig, topics: Mapping[str, Topic]) -> None:
        """Adopt a new broker configuration and the topics :meth:`rebuilt` made from it."""
        self._config = config
        self._topics.update((name, t) for name, t in topics.items() if name in self._topics)
        self._ids = None

    def by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return self._by_id().get(topic_id)

    def _by_id(self) -> dict[uuid.UUID, Topic]:
        if self._ids is None:
            self._ids = {t.topic_id: t for t in self._topics.values()}
        return self._ids

    def get(self, name: str) -> Topic | None:
        return self._topics.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._topics

    def names(self) -> list[str]:
        return sorted(self._topics)

    def all(self) -> list[Topic]:
        """Every registered topic, by name."""
        return [self._topics[name] for name in sorted(self._topics)]

    def default_topic(self, name: str, partitions: int) -> Topic:
        """A topic with the broker defaults, for logs found on disk without a registry entry."""
        return self.make_topic(name, partitions, {})

    def put(self, topic: Topic) -> None:
        """Register (or replace) a topic in memory; call :meth:`save` to persist."""
        self._topics[topic.name] = topic
        self._ids = None

    def remove(self, name: str) -> None:
        self._topics.pop(name, None)
        self._ids = None

    def snapshot(self, adding: Topic | None = None) -> bytes:
        """The registry file contents for the current state (taken on the trio thread), with
        ``adding`` too: a topic being created, persisted before it is registered."""
        topics = [*self._topics.values(), *([] if adding is None else [adding])]
        doc = {
            "version": 1,
            "topics": {
                t.name: {
                    "partitions": t.partitions,
                    "configs": dict(t.overrides),
                    "topic_id": topic_id_string(t.topic_id),
                }
                for t in topics
            },
        }
        return json.dumps(doc, indent=1, sort_keys=True).encode()

    def save(self, snapshot: bytes) -> None:
        """Write a snapshot durably (blocking: run it in a worker thread)."""
        write_atomically(self._path, snapshot)


def new_topic_id() -> uuid.UUID:
    """A random topic id, never one Kafka reserves (the zero UUID, the metadata topic's id 1)
    nor one whose string form starts with '-' (Kafka's Uuid.randomUuid rule: such ids read as
    command-line options)."""
    while True:
        topic_id = uuid.uuid4()
        if topic_id.int > 1 and not topic_id_string(topic_id).startswith("-"):
            return topic_id


def topic_id_string(topic_id: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def topic_id_from_string(text: str) -> uuid.UUID:
    """The inverse of :func:`topic_id_string`; ValueError for anything that is not 16 bytes."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"topic id {text!r} is not 16 bytes of base64")
    return uuid.UUID(bytes=raw)
