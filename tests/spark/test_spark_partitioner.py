"""The writer's key partitioner must agree with Kafka's default partitioner."""

import os

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from pyspark_chronolog.writer import murmur2, partition_for_key


@pytest.mark.parametrize(
    "key, expected",
    [
        # Kafka's UtilsTest.testMurmur2 vectors (Java signed ints)
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key, expected):
    assert murmur2(key) == expected


def test_partition_matches_kafka_python_for_random_keys():
    for n in range(200):
        key = os.urandom(n % 37)
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7
