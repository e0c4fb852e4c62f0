"""A real broker given Kafka 4.1 properties it does not act on: it starts, says which it only
keeps, and reports them (STATIC_BROKER_CONFIG) and Kafka's other names (DEFAULT_CONFIG) through
DescribeConfigs to confluent-kafka's admin client; a topic created with a Kafka topic config
chronolog does not act on keeps it. A name Kafka does not define still stops the broker."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from clients import topic_name
from security_helpers import local_brokers_only, log_entries
from tests.conftest import REPO, BrokerProcess

pytestmark = local_brokers_only


def test_kafka_properties_are_kept_reported_and_named_in_the_log(tmp_path):
    broker = BrokerProcess(
        tmp_path,
        {"num.network.threads": "4", "log.preallocate": "true", "delete.topic.enable": "true"},
    ).start()
    try:
        (line,) = log_entries(broker, "Kafka properties accepted but not acted on")
        assert line["properties"] == [
            "delete.topic.enable",
            "log.preallocate",
            "num.network.threads",
        ]
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
        configs = future.result(30)
        io_threads = configs["num.network.threads"]
        assert (io_threads.value, io_threads.source) == (
            "4",
            ConfigSource.STATIC_BROKER_CONFIG.value,
        )
        relogin = configs["sasl.kerberos.min.time.before.relogin"]
        assert (relogin.value, relogin.source, relogin.is_read_only) == (
            "60000",
            ConfigSource.DEFAULT_CONFIG.value,
            False,
        )
        topic = topic_name("kafka-configs")
        new = NewTopic(topic, 1, 1, config={"remote.storage.enable": "false"})
        for created in admin.create_topics([new]).values():
            created.result(30)
        (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
        configs = future.result(30)
        assert configs["remote.storage.enable"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        preallocate = configs["preallocate"]  # from its broker synonym, log.preallocate
        assert (preallocate.value, preallocate.source) == (
            "true",
            ConfigSource.STATIC_BROKER_CONFIG.value,
        )
    finally:
        broker.stop()


def test_a_name_kafka_does_not_define_stops_the_broker(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--override", "num.io.threadz=4",
         "--override", f"log.dirs={tmp_path}"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "num.io.threadz" in done.stderr
