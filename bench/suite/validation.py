"""What each broker accepts: malformed produce batches, sent raw, and the error code each got.

The broker CPU figures compare unequal work unless both brokers check what they store. Kafka
(LogValidator) decompresses every batch and checks its records (offset deltas, count,
timestamps); chronolog does the same. Each case here is a magic-2 batch with a correct CRC-32C
that Kafka refuses: a broker answering 0 (NONE) stored it without looking inside.
"""

from __future__ import annotations

import struct
import time

from client import BrokerConnection
from protocol import ApiKey
from protocol import recordbatch as rb
from protocol.records import Codec

from .workloads import admin_create_topic

TOPIC = "bench-validation"
PRODUCE_VERSION = 9


def _cases(now_ms: int) -> dict[str, bytes]:
    lz4 = rb.BatchSpec(codec=Codec.LZ4)

    def records(*deltas: int) -> list:
        return [(d, now_ms, b"k", b"v", []) for d in deltas]

    good = rb.build_batch(lz4, records(0, 1))
    count_wrong = bytearray(good)
    struct.pack_into(">i", count_wrong, rb.RECORDS_COUNT_OFFSET, 3)
    zeros = bytearray(good)
    zeros[rb.RECORD_BATCH_OVERHEAD :] = bytes(len(zeros) - rb.RECORD_BATCH_OVERHEAD)
    for batch in (count_wrong, zeros):
        struct.pack_into(">I", batch, rb.CRC_OFFSET, rb.batch_crc(batch, 0, len(batch)))
    return {
        # needs the header only
        "records count 3 over 2 records (header)": bytes(count_wrong),
        # need the records, so the lz4 payload decompressed
        "inner offset deltas 0, 2 under last offset delta 1 (lz4)": rb.build_batch(
            lz4, records(0, 2), last_offset_delta=1
        ),
        "lz4 payload replaced by zeros": bytes(zeros),
    }


def probe(bootstrap: str) -> dict[str, int]:
    """{case: error code answered}; creates TOPIC on the broker at ``bootstrap``."""
    admin_create_topic(bootstrap, TOPIC, 1)
    host, port = bootstrap.rsplit(":", 1)
    answers = {}
    with BrokerConnection(host, int(port), client_id="bench-validation", timeout_s=10) as conn:
        for case, batch in _cases(int(time.time() * 1000)).items():
            body = conn.call(
                ApiKey.PRODUCE,
                PRODUCE_VERSION,
                {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout_ms": 5000,
                    "topic_data": [
                        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}
                    ],
                },
            )
            answers[case] = body["responses"][0]["partition_responses"][0]["error_code"]
    return answers
