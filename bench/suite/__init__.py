"""Side-by-side benchmark suite: chronolog against Tansu (a native Kafka-compatible peer) and
Apache Kafka 4.1.1.

Entry point: ``bench/run_all.py`` (``make bench``). The pieces: ``brokers`` starts and meters the
broker processes, ``scenarios`` holds the measured workloads (each run in a child process),
``runner`` runs the plan in alternating rounds, ``report`` writes the JSON, table and plot.
"""

from .brokers import BrokerProcess, BrokerStartError
from .report import markdown_table, plot, summarize, targets, text_table
from .runner import Suite, build_plan
from .workloads import Digest, ScenarioError

__all__ = [
    "BrokerProcess",
    "BrokerStartError",
    "Digest",
    "ScenarioError",
    "Suite",
    "build_plan",
    "markdown_table",
    "plot",
    "summarize",
    "targets",
    "text_table",
]
