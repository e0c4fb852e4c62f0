"""Api keys, the versions this broker implements, and the wire-level value types.

Everything here is plain data: frozen dataclasses and enums, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from protocol.errors import ErrorCode

__all__ = [
    "ApiKey",
    "SUPPORTED_VERSIONS",
    "CLUSTER_VERSIONS",
    "RequestHeader",
    "Request",
    "Response",
    "FileRegion",
    "RawFrame",
    "api_versions_body",
]


class ApiKey(IntEnum):
    """Kafka api keys (ApiKeys.java) of the apis protocol.schemas has schemas for; the broker
    serves those in :data:`SUPPORTED_VERSIONS`."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_TOPIC_PARTITIONS = 75


# (min, max) per api: the versions the broker serves, up to the newest Kafka 4.1.1 serves
# (protocol.schemas has schemas for every version Kafka 3.9 defines and the newer ones of the apis
# it takes from 4.1.1; it checks at import that these are among them). InitProducerId stops at v5
# as Kafka 4.1.1's does: its v6 (KIP-939, two-phase commit) is still unstable there and not
# advertised. ApiVersions answers from this table, and ServerConnection refuses anything outside
# it.
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 13),
    ApiKey.FETCH: (0, 18),
    ApiKey.LIST_OFFSETS: (0, 10),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (1, 2),
    ApiKey.CREATE_DELEGATION_TOKEN: (1, 3),
    ApiKey.RENEW_DELEGATION_TOKEN: (1, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (1, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (1, 3),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.UPDATE_FEATURES: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
}

# What a broker in a cluster (zookeeper.connect, broker/cluster/) serves besides
# SUPPORTED_VERSIONS: the inter-broker apis at the versions Kafka 3.9's ZooKeeper controller
# sends. A single broker does not decode them.
CLUSTER_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.LEADER_AND_ISR: (6, 6),
    ApiKey.STOP_REPLICA: (3, 3),
    ApiKey.UPDATE_METADATA: (7, 7),
    ApiKey.CONTROLLED_SHUTDOWN: (3, 3),
}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """Request header v1, or v2 at a flexible version (its tagged fields are skipped).

    ``client_id`` is None when the client sent a null string.
    """

    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    """One decoded request. ``body`` is a ``protocol.schemas.Body``, or None for an ApiVersions
    request above the highest version served (answer it with ``api_versions_body(
    ErrorCode.UNSUPPORTED_VERSION)``; ``ServerConnection.send`` then uses the v0 layout)."""

    header: RequestHeader
    body: Any


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame's payload taken as it is, without a request header: a SASL token after a
    SaslHandshake v0 (KIP-152's older exchange), while ``ServerConnection.raw_frames`` is set."""

    payload: bytes


@dataclass(frozen=True, slots=True)
class UndecodedRequest:
    """A large request frame handed out whole (``ServerConnection(decode_beside_bytes=...)``),
    for the caller to decode where it likes, a worker thread say: ``decode()`` returns the
    :class:`Request`, or raises what :meth:`ServerConnection.receive_data` would have."""

    decode: Callable[[], Request]


@dataclass(frozen=True, slots=True)
class Response:
    """One decoded response, matched to its request by correlation id."""

    correlation_id: int
    api_key: ApiKey
    api_version: int
    body: Any


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of ``source`` starting at ``position``, to be sent with sendfile().

    ``source`` is opaque here (the broker passes a file descriptor or file object).
    """

    source: Any
    position: int
    length: int

    def __post_init__(self) -> None:
        if self.position < 0 or self.length < 0:
            raise ValueError(
                f"FileRegion needs position >= 0 and length >= 0, "
                f"got position={self.position} length={self.length}"
            )


def api_versions_body(error_code: int = ErrorCode.NONE) -> dict[str, Any]:
    """The ApiVersions response body advertising :data:`SUPPORTED_VERSIONS` (any version:
    later fields take their defaults)."""
    return {
        "error_code": int(error_code),
        "api_keys": [
            {"api_key": int(key), "min_version": lo, "max_version": hi}
            for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ],
    }
