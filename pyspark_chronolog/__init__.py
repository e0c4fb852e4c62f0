"""A PySpark data source for chronolog (Kafka protocol) topics.

spark.read / readStream .format("chronolog") yield Spark's Kafka-source columns (key, value,
topic, partition, offset, timestamp, timestampType) as Arrow batches; write / writeStream produce
rows to the broker. Spark registers it by itself: a top-level module named pyspark_* exposing
DefaultSource is picked up from the Python path; spark.dataSource.register(ChronologDataSource)
works too. See docs/spark.md.
"""

from .arrow import ARROW_SCHEMA, SPARK_SCHEMA
from .errors import (
    BrokerResponseError,
    BrokerUnavailableError,
    ChronologSourceError,
    DataLossError,
    InvalidOptionError,
    TimestampNotFoundError,
    UnknownTopicError,
)
from .source import ChronologDataSource

DefaultSource = ChronologDataSource

__all__ = [
    "ARROW_SCHEMA",
    "SPARK_SCHEMA",
    "ChronologDataSource",
    "DefaultSource",
    "BrokerResponseError",
    "BrokerUnavailableError",
    "ChronologSourceError",
    "DataLossError",
    "InvalidOptionError",
    "TimestampNotFoundError",
    "UnknownTopicError",
]
