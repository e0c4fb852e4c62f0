"""Helpers for storage tests (imported as tests.storage.helpers): a controllable clock,
validated message sets built with the protocol package's real builder and validator, and a
script run until it kills itself."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from protocol.compression import Codec
from protocol.records import MessageSetBuilder, TimestampType
from protocol.validator import TopicSettings, ValidatedRecords, validate_produce


REPO = Path(__file__).resolve().parents[2]


def run_killed(script: str, *args: str) -> list[str]:
    """Run ``script`` (python -c, from the repository) until it SIGKILLs itself, as a crash
    leaves files; its stdout lines. Fails the test if it ended any other way."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.splitlines()


class Clock:
    """A clock in ms that only moves when a test says so."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def validated(
    log,
    timestamps,
    *,
    codec=Codec.NONE,
    magic=1,
    value_size=10,
    timestamp_type=TimestampType.CREATE_TIME,
    now=None,
    keys=True,
) -> ValidatedRecords:
    """A validated set of len(timestamps) messages to append at ``log.log_end_offset``."""
    builder = MessageSetBuilder(magic=magic, codec=codec)
    for i, ts in enumerate(timestamps):
        builder.append(
            bytes([i % 251]) * value_size, key=b"k%d" % i if keys else None, timestamp=ts
        )
    settings = TopicSettings(magic=magic, timestamp_type=timestamp_type)
    result = validate_produce(
        builder.build(),
        settings,
        next_offset=log.log_end_offset,
        now_ms=now if now is not None else 1_700_000_000_000,
    )
    assert isinstance(result, ValidatedRecords), result
    return result


def producer_set(
    log,
    producer_id: int,
    epoch: int,
    sequence: int,
    count: int,
    *,
    transactional: bool = False,
    now: int = 1_700_000_000_000,
) -> ValidatedRecords:
    """A validated v2 batch of ``count`` records from a producer (transactional or only
    idempotent), keyed by producer and sequence, to append at ``log.log_end_offset``."""
    from protocol import recordbatch as rb

    spec = rb.BatchSpec(
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )
    records = [
        (i, now, b"p%d-k%d" % (producer_id, sequence + i), b"v%d" % (sequence + i), ())
        for i in range(count)
    ]
    result = validate_produce(
        rb.build_batch(spec, records),
        TopicSettings(magic=2),
        next_offset=log.log_end_offset,
        now_ms=now,
    )
    assert isinstance(result, ValidatedRecords), result
    return result
