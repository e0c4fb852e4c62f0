"""Every broker property and topic config Kafka 4.1.1 defines is known, as Kafka's own definitions
say (broker/admin/kafka_configs.py, generated from Kafka's jars; regenerated here and compared
when the jars are at hand): DescribeConfigs reports each with Kafka's default, type and
read-only flag, and AlterConfigs accepts or refuses each as Kafka's DynamicBrokerConfig does.
Names chronolog acts on keep chronolog's behaviour; a name Kafka does not define is still
refused."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from broker.admin import kafka_configs
from broker.admin.configs import (
    ACCEPTED_DYNAMIC_KEYS,
    BrokerLayers,
    ConfigSource,
    ConfigType,
    broker_entries,
    topic_entries,
)
from broker.admin.dynamic import (
    DynamicConfigs,
    NotDynamicError,
    PerBrokerOnlyError,
    PerListenerOnlyError,
)
from broker.config import (
    BROKER_KEYS,
    KAFKA_ONLY_BROKER_KEYS,
    KAFKA_ONLY_TOPIC_KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigError,
    parse_topic_configs,
)

BROKER = kafka_configs.BROKER
TOPIC = kafka_configs.TOPIC
MAVEN = Path.home() / ".m2" / "repository"
JVM_LIB = Path(__file__).resolve().parents[2] / "build" / "jvm" / "lib"


def _layers(config: BrokerConfig, per_broker=None, cluster_default=None) -> BrokerLayers:
    return BrokerLayers(per_broker or {}, cluster_default or {}, config.given)


def test_the_table_is_kafkas_own():
    """The committed module is what the generator writes from Kafka 4.1.1's jars now (those of
    ``make kafka-jvm``, else a local Maven repository's)."""
    sources = [JVM_LIB, MAVEN]
    found = [
        d
        for d in sources
        if (d / "kafka_2.13-4.1.1.jar").exists()
        or (d / "org/apache/kafka/kafka_2.13/4.1.1/kafka_2.13-4.1.1.jar").exists()
    ]
    if not found or shutil.which("javac") is None:
        pytest.skip("Kafka 4.1.1's jars are not here: make kafka-jvm (or see the generator)")
    from broker.admin import generate_kafka_configs

    fresh = generate_kafka_configs.render(generate_kafka_configs.dump(found[0]))
    namespace: dict = {}
    exec(compile(fresh, "fresh", "exec"), namespace)
    assert namespace["BROKER"] == BROKER
    assert namespace["BROKER_QUOTAS"] == kafka_configs.BROKER_QUOTAS
    assert namespace["TOPIC"] == TOPIC
    assert namespace["TOPIC_SYNONYMS"] == kafka_configs.TOPIC_SYNONYMS


def test_the_table_holds_what_kafka_documents():
    """Spot checks against Kafka 4.1's documentation (an independent reading)."""
    assert len(BROKER) > 300 and len(TOPIC) == 33
    assert BROKER["sasl.kerberos.min.time.before.relogin"] == (
        "LONG", "60000", "MEDIUM", None, None, None, "per-broker"
    )  # fmt: skip
    assert BROKER["num.io.threads"][1] == "8" and BROKER["num.io.threads"][6] == "cluster-wide"
    assert BROKER["process.roles"][6] == "read-only"
    assert BROKER["ssl.keystore.location"][6] == "per-listener"
    assert TOPIC["retention.ms"][1] == "604800000"
    assert TOPIC["cleanup.policy"][5] == ("compact", "delete")
    assert kafka_configs.TOPIC_SYNONYMS["segment.ms"] == (
        ("log.roll.ms", 1),
        ("log.roll.hours", 3600000),
    )


def test_every_kafka_name_is_known():
    assert set(BROKER) | set(kafka_configs.BROKER_QUOTAS) <= set(BROKER_KEYS) | set(
        KAFKA_ONLY_BROKER_KEYS
    )
    assert set(TOPIC) <= set(TOPIC_KEYS) | set(KAFKA_ONLY_TOPIC_KEYS)


def test_describe_configs_reports_every_broker_name_with_kafkas_defaults():
    config = BrokerConfig.from_properties([])
    entries = {e.name: e for e in broker_entries(_layers(config), per_broker=True)}
    assert set(BROKER) <= set(entries)
    assert not set(kafka_configs.BROKER_QUOTAS) & set(entries)  # only once set
    for name, (type_, default, _, _, _, _, mode) in BROKER.items():
        if name in BROKER_KEYS:
            continue  # chronolog's own: its defaults (config/server.properties)
        entry = entries[name]
        assert entry.source == ConfigSource.DEFAULT_CONFIG, name
        assert entry.type == ConfigType[type_], name
        assert entry.read_only == (mode not in ("per-broker", "cluster-wide")), name
        if type_ == "PASSWORD":
            assert entry.sensitive and entry.value is None, name
        else:
            assert entry.value == default, name


def test_describe_configs_reports_every_topic_name_with_kafkas_defaults():
    config = BrokerConfig.from_properties([])
    entries = {e.name: e for e in topic_entries({}, config.topic_config(), _layers(config))}
    assert set(TOPIC) <= set(entries)
    for name, (type_, default, *_rest) in TOPIC.items():
        if name in TOPIC_KEYS:
            continue
        assert entries[name].value == default, name
        assert entries[name].type == ConfigType[type_], name
        assert not entries[name].read_only


def test_a_static_property_kafka_defines_is_accepted_and_reported():
    config = BrokerConfig.from_properties(
        [("num.network.threads", "4"), ("log.preallocate", "true")]
    )
    layers = _layers(config)
    broker = {e.name: e for e in broker_entries(layers, per_broker=True)}
    assert (broker["num.network.threads"].value, broker["num.network.threads"].source) == (
        "4",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    # a topic config Kafka defines follows its broker synonym, as Kafka's do
    topic = {e.name: e for e in topic_entries({}, config.topic_config(), layers)}
    assert topic["preallocate"].value == "true"
    assert topic["preallocate"].source == ConfigSource.STATIC_BROKER_CONFIG
    with pytest.raises(ConfigError, match="num.network.threads"):
        BrokerConfig.from_properties([("num.network.threads", "0")])  # Kafka's atLeast(1)
    with pytest.raises(ConfigError, match="no.such.property"):
        BrokerConfig.from_properties([("no.such.property", "1")])


def test_topic_configs_kafka_defines_are_stored_and_validated():
    overrides = parse_topic_configs(
        {"remote.storage.enable": "false", "compression.zstd.level": "3"}
    )
    assert overrides == {"remote.storage.enable": "false", "compression.zstd.level": "3"}
    config = BrokerConfig.from_properties([])
    entries = {
        e.name: e for e in topic_entries(overrides, config.topic_config(overrides), _layers(config))
    }
    assert entries["compression.zstd.level"].value == "3"
    assert entries["compression.zstd.level"].source == ConfigSource.TOPIC_CONFIG
    with pytest.raises(ConfigError, match="compression.zstd.level"):
        parse_topic_configs({"compression.zstd.level": "99"})  # Kafka's range [-131072, 22]
    with pytest.raises(ConfigError, match="no.such.config"):
        parse_topic_configs({"no.such.config": "1"})


@pytest.mark.parametrize("name", sorted(KAFKA_ONLY_BROKER_KEYS))
def test_alter_configs_answers_each_name_as_kafka(name):
    """What Kafka's DynamicBrokerConfig.validateConfigs decides for each name chronolog does not
    act on, with its default as the new value."""
    key = KAFKA_ONLY_BROKER_KEYS[name]
    mode = kafka_configs.BROKER.get(name, kafka_configs.BROKER_QUOTAS.get(name))[6]
    raw = kafka_configs.BROKER.get(name, kafka_configs.BROKER_QUOTAS.get(name))[1]
    value = {name: raw if raw is not None else "x"}
    if key.type.name in ("INT", "LONG", "SHORT", "DOUBLE") and raw is None:
        value = {name: "1"}
    if mode == "read-only":
        with pytest.raises(NotDynamicError, match="Cannot update these configs dynamically"):
            DynamicConfigs.validate(value, per_broker=True)
    elif mode == "per-listener":
        with pytest.raises(PerListenerOnlyError, match="per-listener using the listener prefix"):
            DynamicConfigs.validate(value, per_broker=True)
    elif mode == "per-broker":
        assert name in ACCEPTED_DYNAMIC_KEYS
        assert DynamicConfigs.validate(value, per_broker=True) == value
        with pytest.raises(PerBrokerOnlyError, match="broker id must be specified"):
            DynamicConfigs.validate(value, per_broker=False)
    else:
        assert mode == "cluster-wide" and name in ACCEPTED_DYNAMIC_KEYS
        assert DynamicConfigs.validate(value, per_broker=False) == value
        assert DynamicConfigs.validate(value, per_broker=True) == value


def test_a_dynamic_name_kafka_defines_is_described_from_its_layer():
    config = BrokerConfig.from_properties([])
    layers = _layers(
        config,
        per_broker={"sasl.kerberos.min.time.before.relogin": "58000"},
        cluster_default={"num.io.threads": "6"},
    )
    broker = {e.name: e for e in broker_entries(layers, per_broker=True)}
    relogin = broker["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.value, relogin.source, relogin.read_only) == (
        "58000",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
        False,
    )
    assert [(s.value, s.source) for s in relogin.synonyms] == [
        ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("60000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert broker["num.io.threads"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    cluster = [e.name for e in broker_entries(layers, per_broker=False)]
    assert cluster == ["num.io.threads"]
    # the merged configuration still builds, with the names laid over
    DynamicConfigs(config).effective(config, {"num.io.threads": "6"}, {})


def test_a_name_kafka_does_not_define_is_still_refused():
    with pytest.raises(ConfigError, match="no.such.property"):
        DynamicConfigs.validate({"no.such.property": "1"}, per_broker=True)


def test_the_operations_page_lists_the_names_not_acted_on():
    page = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = page.split("<!-- kafka-only-configs")[1].split("<!-- /kafka-only-configs -->")[0]
    topics, brokers = section.split("- broker properties:")
    listed = lambda text: set(re.findall(r"`([a-z0-9.]+)`", text))  # noqa: E731
    assert listed(topics) == set(KAFKA_ONLY_TOPIC_KEYS)
    assert listed(brokers) == set(KAFKA_ONLY_BROKER_KEYS)
