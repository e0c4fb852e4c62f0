"""One local[2] SparkSession for every Spark test (start-up costs ~5 s), with Spark's own Kafka
source and sink on its classpath (build/spark-kafka/, `make spark-kafka`)."""

import os
import sys
from pathlib import Path

import pytest

SPARK_KAFKA_JARS = Path(__file__).resolve().parents[2] / "build" / "spark-kafka"


@pytest.fixture(scope="session")
def spark():
    # Workers must run this interpreter, which has pyspark_chronolog installed.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    # spark.jars is read when the JVM starts, so the one session carries the Kafka source for
    # every module: a second session in the same process would be this one.
    jars = sorted(SPARK_KAFKA_JARS.glob("*.jar"))
    assert jars, (
        f"no jars in {SPARK_KAFKA_JARS}: run `make spark-kafka` (part of make install-test)"
    )
    session = (
        SparkSession.builder.master("local[2]")
        .appName("chronolog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
