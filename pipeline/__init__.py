"""Spark jobs over chronolog topics (see docs/spark.md)."""
