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
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": 1,
    "delete_retention_ms": 0,
}
COMPACT = "compact"
DELETE = "delete"
_NON_INT_FIELDS = ("cleanup_policy", "min_cleanable_dirty_ratio")


def parse_cleanup_policy(value: str) -> str:
    """A cleanup.policy normalised ("compact, delete" -> "compact,delete"); raises
    InvalidConfigError unless it is a non-empty list of delete and compact."""
    parts = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else []
    if not parts or any(p not in (COMPACT, DELETE) for p in parts):
        raise InvalidConfigError(
            f"log config cleanup_policy={value!r} is not a list of {DELETE}, {COMPACT}"
        )
    return ",".join(parts)


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
    # Compaction (storage.cleaner): Kafka's cleanup.policy, min.cleanable.dirty.ratio,
    # min.compaction.lag.ms (KIP-58), max.compaction.lag.ms (KIP-354), delete.retention.ms.
    cleanup_policy: str = DELETE
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86400000

    def __post_init__(self) -> None:
        if parse_cleanup_policy(self.cleanup_policy) != self.cleanup_policy:
            raise InvalidConfigError(
                f"log config cleanup_policy={self.cleanup_policy!r} is not written as "
                f"{parse_cleanup_policy(self.cleanup_policy)!r}"
            )
        ratio = self.min_cleanable_dirty_ratio
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0 <= ratio <= 1:
            raise InvalidConfigError(
                f"log config min_cleanable_dirty_ratio={ratio!r} is not a number in [0, 1]"
            )
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise InvalidConfigError(
                f"log config min_compaction_lag_ms={self.min_compaction_lag_ms} exceeds "
                f"max_compaction_lag_ms={self.max_compaction_lag_ms}"
            )
        for field in dataclasses.fields(self):
            if field.name in _NON_INT_FIELDS:
                continue
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

    @property
    def compact(self) -> bool:
        """cleanup.policy includes compact: the log cleaner keeps the latest value per key."""
        return COMPACT in self.cleanup_policy  # normalised: a list of compact and delete

    @property
    def delete(self) -> bool:
        """cleanup.policy includes delete: retention.ms and retention.bytes delete segments."""
        return DELETE in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How long the active segment may stay open: segment.ms, or max.compaction.lag.ms when
        that is shorter on a compacted log, so the cleaner can reach every record in time
        (KIP-354; Kafka's LogConfig.maxSegmentMs)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    def with_overrides(self, overrides: Mapping[str, str | int | float]) -> LogConfig:
        """A copy with Kafka topic-config overrides applied; keys may use Kafka's dotted names
        (``segment.bytes``) or the field names. Unknown keys and values of the wrong type raise
        InvalidConfigError."""
        names = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, object] = {}
        for key, raw in overrides.items():
            name = key.replace(".", "_")
            if name not in names:
                raise InvalidConfigError(f"unknown log config {key!r}")
            if name == "cleanup_policy":
                changes[name] = parse_cleanup_policy(str(raw))
                continue
            convert = float if name == "min_cleanable_dirty_ratio" else int
            try:
                changes[name] = convert(raw)
            except (TypeError, ValueError):
                kind = "a number" if convert is float else "an integer"
                raise InvalidConfigError(f"log config {key}={raw!r} is not {kind}") from None
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
