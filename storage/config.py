"""Per-topic log configuration (Kafka's topic-level names in snake_case, Kafka's defaults)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Smallest legal values: a segment must hold at least one minimal entry (12-byte log overhead +
# 14-byte message); an index must hold at least two entries (one slot stays free for roll).
MINIMUMS = {
    "segment_bytes": 26,
    "segment_ms": 1,
    "segment_jitter_ms": 0,
    "index_interval_bytes": 0,
    "segment_index_bytes": 24,
    "max_message_bytes": 0,
    "flush_messages": 1,
    "flush_ms": 0,
    "file_delete_delay_ms": 0,
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition's log. ``retention_ms``/``retention_bytes`` < 0 mean unlimited.

    Raises :class:`InvalidConfigError` for values below the minimum Kafka accepts.
    """

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    retention_ms: int = 604800000
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    max_message_bytes: int = 1000012
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60000

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidConfigError(
                    f"log config {field.name} must be an integer, got {value!r}"
                )
            minimum = MINIMUMS.get(field.name)
            if minimum is not None and value < minimum:
                raise InvalidConfigError(
                    f"log config {field.name}={value} is below the minimum {minimum}"
                )
        if self.segment_bytes > INT_MAX:
            raise InvalidConfigError(
                f"log config segment_bytes={self.segment_bytes} exceeds "
                f"{INT_MAX}: index positions are int32"
            )

    def with_overrides(self, overrides: Mapping[str, str | int]) -> LogConfig:
        """A copy with Kafka topic-config overrides applied; keys may use Kafka's dotted names
        (``segment.bytes``) or the field names. Unknown keys raise InvalidConfigError."""
        names = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, int] = {}
        for key, raw in overrides.items():
            name = key.replace(".", "_")
            if name not in names:
                raise InvalidConfigError(f"unknown log config {key!r}")
            try:
                changes[name] = int(raw)
            except (TypeError, ValueError):
                raise InvalidConfigError(f"log config {key}={raw!r} is not an integer") from None
        return dataclasses.replace(self, **changes)
