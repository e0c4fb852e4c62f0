"""``__transaction_state`` records (Kafka's TransactionLog, its key and value schemas generated
from kafka-transaction-coordinator 4.1.1's TransactionLogKey.json and TransactionLogValue.json):

    key   = int16 version (0), STRING transactional_id
    value = int16 version, then TransactionLogValue at that version:
        int64 producer_id, int16 producer_epoch, int32 transaction_timeout_ms,
        int8 transaction_status (TxnState id), nullable [topic STRING, [int32 partition]],
        int64 last_update_timestamp_ms, int64 start_timestamp_ms
      v1 is v0 in the flexible encoding with tagged fields previous_producer_id (0),
      next_producer_id (1), client_transaction_version (2), next_producer_epoch (3).
    a null value is a tombstone: the transactional id expired.

As Kafka, v0 is written until the ``transaction.version`` feature is at least 1, and the
partitions are null in the Empty state. Kafka's ``DumpLogSegments --transaction-log-decoder``
reads these records.
"""

from __future__ import annotations

import struct
from typing import Any, cast

from broker.txn.state import TxnMetadata, TxnState, partitions_by_topic
from protocol.schemas.codec import Body, FieldError, MessageCodec, build_codec
from protocol.schemas.definitions import MESSAGES

_VERSION = struct.Struct(">h")
_KEY = build_codec(MESSAGES["TransactionLogKey"], 0)
_VALUES = {v: build_codec(MESSAGES["TransactionLogValue"], v) for v in (0, 1)}


class TxnRecordError(ValueError):
    """Raised when a ``__transaction_state`` key or value does not decode: truncated, of an
    unknown version, or holding an unknown state."""


def _encode(codec: MessageCodec, version: int, body: dict[str, Any]) -> bytes:
    chunks, _ = codec.encode(body, None)
    # Only a records field encodes to a FileRegion, and these messages have none.
    return _VERSION.pack(version) + b"".join(bytes(cast(bytes, c)) for c in chunks)


def encode_key(transactional_id: str) -> bytes:
    return _encode(_KEY, 0, {"transactional_id": transactional_id})


def encode_value(meta: TxnMetadata, version: int) -> bytes:
    """The record value of ``meta`` at value ``version`` (0 or 1)."""
    partitions = (
        None
        if meta.state is TxnState.EMPTY
        else [
            {"topic": topic, "partition_ids": ids}
            for topic, ids in partitions_by_topic(meta.partitions).items()
        ]
    )
    return _encode(
        _VALUES[version],
        version,
        {
            "producer_id": meta.producer_id,
            "previous_producer_id": meta.previous_producer_id,
            "next_producer_id": meta.next_producer_id,
            "producer_epoch": meta.producer_epoch,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_status": meta.state.id,
            "transaction_partitions": partitions,
            "transaction_last_update_timestamp_ms": meta.last_update_ms,
            "transaction_start_timestamp_ms": meta.start_ms,
            "client_transaction_version": meta.client_version,
        },
    )


def _version_and_body(data: bytes, codecs: dict[int, MessageCodec], what: str) -> Body:
    if len(data) < 2:
        raise TxnRecordError(f"{what} of {len(data)} bytes has no version")
    (version,) = _VERSION.unpack_from(data)
    codec = codecs.get(version)
    if codec is None:
        raise TxnRecordError(f"{what} version {version} is unknown (0-{max(codecs)} are read)")
    try:
        body, end = codec.decode(data, 2, len(data))
    except FieldError as exc:
        raise TxnRecordError(f"{what} version {version} does not decode: {exc}") from None
    return body


def decode_key(data: bytes) -> str:
    """The transactional id of a record key."""
    transactional_id: str = _version_and_body(
        data, {0: _KEY}, "transaction log key"
    ).transactional_id
    return transactional_id


def decode_value(transactional_id: str, data: bytes | None) -> TxnMetadata | None:
    """The metadata of a record value; None for a tombstone."""
    if data is None:
        return None
    body = _version_and_body(data, _VALUES, "transaction log value")
    try:
        state = TxnState.from_id(body.transaction_status)
    except ValueError as exc:
        raise TxnRecordError(str(exc)) from None
    partitions = frozenset(
        (p.topic, partition)
        for p in body.transaction_partitions or ()
        for partition in p.partition_ids
    )
    return TxnMetadata(
        transactional_id,
        body.producer_id,
        body.producer_epoch,
        body.transaction_timeout_ms,
        state,
        partitions if state is not TxnState.EMPTY else frozenset(),
        body.transaction_start_timestamp_ms,
        body.transaction_last_update_timestamp_ms,
        previous_producer_id=body.previous_producer_id,
        next_producer_id=body.next_producer_id,
        client_version=body.client_transaction_version,
    )
