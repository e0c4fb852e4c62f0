"""Data source options, parsed once on the driver into frozen dataclasses.

Names and meanings follow Spark's Kafka source (startingOffsets, endingOffsets, startingTimestamp,
endingTimestamp, startingOffsetsByTimestamp, endingOffsetsByTimestamp,
startingOffsetsByTimestampStrategy, failOnDataLoss, maxOffsetsPerTrigger, maxRecordsPerPartition,
kafka.bootstrap.servers, kafka.isolation.level, includeHeaders). Option names are case-insensitive, as Spark's are. Every problem raises
InvalidOptionError naming the option and what a valid value looks like.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from .errors import InvalidOptionError

# Kafka's sentinel offsets in offset JSON (as in Spark's Kafka source) and ListOffsets.
LATEST = -1
EARLIEST = -2

TopicPartition = tuple[str, int]

# kafka.isolation.level values, as Kafka's consumer names them.
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


@dataclass(frozen=True)
class Bound:
    """Where a read starts or ends.

    kind: "earliest" | "latest" | "offsets" (per-partition offsets, may hold EARLIEST/LATEST) |
    "timestamp" (one time for every partition) | "timestamps" (per-partition times), in ms.
    """

    kind: str
    timestamp: int | None = None
    per_partition: tuple[tuple[TopicPartition, int], ...] = ()

    def for_partition(self, tp: TopicPartition) -> int:
        """The offset or timestamp given for ``tp`` (per-partition kinds only)."""
        for key, value in self.per_partition:
            if key == tp:
                return value
        raise KeyError(tp)


@dataclass(frozen=True)
class ConnectOptions:
    bootstrap: tuple[tuple[str, int], ...]
    request_timeout_ms: int = 30_000


@dataclass(frozen=True)
class ReadOptions:
    connect: ConnectOptions
    topics: tuple[str, ...]
    starting: Bound
    ending: Bound
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: "error" | "latest"
    fail_on_data_loss: bool = True
    max_records_per_partition: int = 1_000_000
    max_offsets_per_trigger: int | None = None
    max_partition_fetch_bytes: int = 4 * 1024 * 1024
    streaming: bool = False
    include_headers: bool = False
    isolation_level: str = READ_COMMITTED

    @property
    def read_committed(self) -> bool:
        """Whether reads end at the last stable offset and skip aborted transactions."""
        return self.isolation_level == READ_COMMITTED

    @property
    def window(self) -> tuple[int | None, int | None]:
        """(start ms inclusive, end ms exclusive) when a batch read is bounded by global
        timestamps.

        Rows outside it are dropped: with out-of-order CreateTime a message older than the
        starting time can sit after the starting offset. A stream only starts at its time.
        """
        if self.streaming:
            return (None, None)
        return (
            self.starting.timestamp if self.starting.kind == "timestamp" else None,
            self.ending.timestamp if self.ending.kind == "timestamp" else None,
        )


@dataclass(frozen=True)
class WriteOptions:
    connect: ConnectOptions
    topic: str | None  # None: every row carries a topic column
    acks: int = -1
    batch_bytes: int = 1024 * 1024
    produce_timeout_ms: int = 30_000


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _int(
    opts: dict[str, str], name: str, default: int | None, *, minimum: int | None = None
) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise InvalidOptionError(f"option {name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise InvalidOptionError(f"option {name}={value} must be >= {minimum}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise InvalidOptionError(f"option {name}={raw!r} must be true or false")


def parse_connect(options: Mapping[str, str]) -> ConnectOptions:
    opts = _lower(options)
    raw = opts.get("kafka.bootstrap.servers") or opts.get("bootstrap.servers")
    if not raw:
        raise InvalidOptionError(
            'option bootstrap.servers is required, e.g. .option("bootstrap.servers", '
            '"127.0.0.1:9092")'
        )
    servers = []
    for item in raw.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidOptionError(
                f"bootstrap.servers entry {item.strip()!r} is not host:port (e.g. 127.0.0.1:9092)"
            )
        servers.append((host.strip("[]"), int(port)))
    timeout = _int(opts, "kafka.request.timeout.ms", 30_000, minimum=1)
    return ConnectOptions(tuple(servers), timeout)


def _topics(opts: dict[str, str]) -> tuple[str, ...]:
    given = [name for name in ("topic", "subscribe", "assign", "subscribepattern") if name in opts]
    if "assign" in given or "subscribepattern" in given:
        raise InvalidOptionError(
            "options assign and subscribePattern are not supported; name the topics with "
            "topic or subscribe (a comma-separated list)"
        )
    if len(given) != 1:
        raise InvalidOptionError(
            "exactly one of the options topic or subscribe is required, e.g. "
            '.option("topic", "clicks") or .option("subscribe", "clicks,views")'
        )
    topics = tuple(dict.fromkeys(t.strip() for t in opts[given[0]].split(",") if t.strip()))
    if not topics:
        raise InvalidOptionError(f"option {given[0]} names no topic")
    return topics


def _per_partition_json(
    name: str, raw: str, topics: tuple[str, ...]
) -> tuple[tuple[TopicPartition, int], ...]:
    example = '{"clicks": {"0": 23, "1": -2}}'
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidOptionError(
            f"option {name} is not valid JSON ({exc}); expected e.g. {example}"
        ) from None
    if not isinstance(parsed, dict):
        raise InvalidOptionError(f"option {name} must be a JSON object like {example}")
    out = []
    for topic, parts in parsed.items():
        if topic not in topics:
            raise InvalidOptionError(
                f"option {name} names topic {topic!r}, which is not among the subscribed "
                f"topics {list(topics)}"
            )
        if not isinstance(parts, dict):
            raise InvalidOptionError(
                f"option {name}: the value for topic {topic!r} must be an "
                f"object of partition -> number, e.g. {example}"
            )
        for part, value in parts.items():
            if not str(part).isdigit() or isinstance(value, bool) or not isinstance(value, int):
                raise InvalidOptionError(
                    f"option {name}: {topic}[{part}] = {value!r}; partitions are non-negative "
                    f"integers and values integers, e.g. {example}"
                )
            out.append(((topic, int(part)), value))
    return tuple(sorted(out))


def _bound(opts: dict[str, str], prefix: str, topics: tuple[str, ...], default: str) -> Bound:
    """One Bound from the <prefix>Offsets / <prefix>Timestamp / <prefix>OffsetsByTimestamp
    options; giving more than one of them is an error rather than a silent precedence."""
    names = {
        f"{prefix}offsets": f"{prefix}Offsets",
        f"{prefix}timestamp": f"{prefix}Timestamp",
        f"{prefix}offsetsbytimestamp": f"{prefix}OffsetsByTimestamp",
    }
    given = [key for key in names if key in opts]
    if len(given) > 1:
        raise InvalidOptionError(
            f"options {' and '.join(names[g] for g in given)} contradict each other; give one"
        )
    if not given:
        return Bound(default)
    key = given[0]
    raw = opts[key].strip()
    name = names[key]
    if key.endswith("offsets"):
        if raw.lower() in ("earliest", "latest"):
            if prefix == "ending" and raw.lower() == "earliest":
                raise InvalidOptionError(
                    'endingOffsets="earliest" is not allowed; use "latest" or per-partition JSON'
                )
            return Bound(raw.lower())
        pairs = _per_partition_json(name, raw, topics)
        for (topic, part), value in pairs:
            allowed = (LATEST,) if prefix == "ending" else (LATEST, EARLIEST)
            if value < 0 and value not in allowed:
                raise InvalidOptionError(
                    f"option {name}: {topic}[{part}] = {value}; offsets are >= 0, or "
                    + ("-1 for latest" if prefix == "ending" else "-1 latest / -2 earliest")
                )
        return Bound("offsets", per_partition=pairs)
    if key.endswith("timestamp"):
        try:
            ts = int(raw)
        except ValueError:
            raise InvalidOptionError(
                f"option {name}={raw!r} must be milliseconds since the epoch (an integer)"
            ) from None
        if ts < 0:
            raise InvalidOptionError(
                f"option {name}={ts} must be >= 0 (milliseconds since the epoch)"
            )
        return Bound("timestamp", timestamp=ts)
    pairs = _per_partition_json(name, raw, topics)
    for (topic, part), value in pairs:
        if value < 0:
            raise InvalidOptionError(
                f"option {name}: {topic}[{part}] = {value}; timestamps are "
                f"milliseconds since the epoch (>= 0)"
            )
    return Bound("timestamps", per_partition=pairs)


def parse_read(options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
    """Parse reader options; streaming readers start at "latest" by default, as Spark's do."""
    opts = _lower(options)
    connect = parse_connect(opts)
    topics = _topics(opts)
    starting = _bound(opts, "starting", topics, "latest" if streaming else "earliest")
    if streaming and any(
        k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
    ):
        raise InvalidOptionError(
            "ending offsets/timestamps are not supported by "
            "readStream; use spark.read for a bounded read"
        )
    ending = Bound("latest") if streaming else _bound(opts, "ending", topics, "latest")
    if starting.kind == "latest" and not streaming:
        raise InvalidOptionError(
            'startingOffsets="latest" is not allowed for a batch read '
            '(it would always be empty); use "earliest", JSON offsets or '
            "startingTimestamp"
        )
    if (
        starting.kind == "timestamp"
        and ending.kind == "timestamp"
        and ending.timestamp < starting.timestamp
    ):
        raise InvalidOptionError(
            f"endingTimestamp={ending.timestamp} is before startingTimestamp="
            f"{starting.timestamp}; the window [start, end) would be empty - swap them?"
        )
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise InvalidOptionError(
            f'option startingOffsetsByTimestampStrategy={strategy!r} must be "error" or "latest"'
        )
    raw_isolation = opts.get("kafka.isolation.level", READ_COMMITTED)
    isolation = raw_isolation.strip().lower()
    if isolation not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise InvalidOptionError(
            f"option kafka.isolation.level={raw_isolation!r} must be {READ_COMMITTED!r} (default: "
            f"committed transactions only) or {READ_UNCOMMITTED!r} (aborted and open ones too)"
        )
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", None, minimum=1)
    if max_per_trigger is not None and not streaming:
        raise InvalidOptionError("option maxOffsetsPerTrigger applies to readStream only")
    return ReadOptions(
        connect=connect,
        topics=topics,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", 1_000_000, minimum=1),
        max_offsets_per_trigger=max_per_trigger,
        max_partition_fetch_bytes=_int(
            opts, "kafka.max.partition.fetch.bytes", 4 * 1024 * 1024, minimum=1024
        ),
        streaming=streaming,
        include_headers=include_headers(opts),
        isolation_level=isolation,
    )


def include_headers(options: Mapping[str, str]) -> bool:
    """Spark's includeHeaders: whether rows carry a ``headers`` column (default false)."""
    return _bool(_lower(options), "includeHeaders", False)


def parse_write(options: Mapping[str, str]) -> WriteOptions:
    opts = _lower(options)
    connect = parse_connect(opts)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise InvalidOptionError("option topic is empty")
    acks = _int(opts, "kafka.acks", -1)
    if acks not in (-1, 1):
        raise InvalidOptionError(
            f"option kafka.acks={acks} must be -1 (all) or 1; the writer "
            f"checks every produce response, so 0 is not offered"
        )
    return WriteOptions(
        connect=connect,
        topic=topic.strip() if topic else None,
        acks=acks,
        batch_bytes=_int(opts, "kafka.batch.size", 1024 * 1024, minimum=1024),
        produce_timeout_ms=_int(opts, "kafka.request.timeout.ms", 30_000, minimum=1),
    )
