"""Spark jobs over chronolog topics (see README.md, section "Spark")."""
