"""The Kafka oracle's fixture for the tests in this directory (see kafka_oracle.py)."""

from tests.oracle.kafka_oracle import kafka_oracle

__all__ = ["kafka_oracle"]
