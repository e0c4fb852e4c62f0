"""The DataSource Spark finds under the name "chronolog"."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from .arrow import SPARK_SCHEMA, SPARK_SCHEMA_WITH_HEADERS
from .options import include_headers
from .reader import batch_reader, stream_reader
from .writer import make_writer


class ChronologDataSource(DataSource):
    """spark.read / readStream / write / writeStream .format("chronolog").

    Options are parsed when Spark asks for a reader or writer, so a bad option fails the query
    at planning time with InvalidOptionError.
    """

    @classmethod
    def name(cls) -> str:
        return "chronolog"

    def schema(self) -> str:
        return SPARK_SCHEMA_WITH_HEADERS if include_headers(self.options) else SPARK_SCHEMA

    def reader(self, schema):
        return batch_reader(self.options)

    def streamReader(self, schema):
        return stream_reader(self.options)

    def writer(self, schema, overwrite: bool):
        return make_writer(self.options, schema, overwrite, streaming=False)

    def streamWriter(self, schema, overwrite: bool):
        return make_writer(self.options, schema, overwrite, streaming=True)
