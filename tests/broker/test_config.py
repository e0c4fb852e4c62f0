"""Broker property and topic config parsing/validation."""

import subprocess
import sys

import pytest

from broker.config import (
    LONG_MAX,
    BrokerConfig,
    ConfigError,
    TopicConfig,
    format_magic,
    metadata_version_at_least,
    load_config,
    parse_properties,
    parse_topic_configs,
    topic_name_error,
)

REPO_CONFIG = "config/server.properties"


def cfg(**props) -> BrokerConfig:
    return BrokerConfig.from_properties([(k.replace("_", "."), str(v)) for k, v in props.items()])


def test_properties_syntax():
    text = (
        "# comment\n! also comment\n\n"
        "a=1\n"
        "b : two words  \n"
        "c three\n"
        "d=line\\\n    continued\n"
        "e\\=x=y\n"
        "f=\\u0041\\t\n"
        "g=\n"
    )
    assert parse_properties(text) == [
        ("a", "1"),
        ("b", "two words"),
        ("c", "three"),
        ("d", "linecontinued"),
        ("e=x", "y"),
        ("f", "A"),
        ("g", ""),
    ]


def test_repo_config_file_is_valid_and_documents_every_key():
    from broker.config import BROKER_KEYS

    config = load_config(REPO_CONFIG)
    assert (config.host, config.port) == ("127.0.0.1", 9092)
    assert config.log_dirs == ("./data",)
    text = open(REPO_CONFIG).read()
    missing = [k for k in BROKER_KEYS if k not in text]
    assert missing == []
    # every key is set to its default there, and says so in its comment
    assert config.offset_metadata_max_bytes == 4096
    assert "offset.metadata.max.bytes=4096" in text


def test_defaults_match_kafka():
    c = cfg(log_dirs="/tmp/x")
    t = c.topic_config()
    assert t.segment_bytes == 1073741824
    assert t.segment_ms == 168 * 3600 * 1000
    assert t.retention_ms == 168 * 3600 * 1000
    assert t.retention_bytes == -1
    assert t.index_interval_bytes == 4096
    assert t.segment_index_bytes == 10485760
    assert t.max_message_bytes == 1000012
    assert t.flush_messages == LONG_MAX and t.flush_ms == LONG_MAX
    assert t.file_delete_delay_ms == 60000
    # message.format.version follows Kafka 3.9 (3.0-IV1: record batches), not 0.10.1
    assert t.message_timestamp_type == "CreateTime" and t.magic == 2
    assert c.num_partitions == 1 and c.auto_create_topics_enable
    assert c.log_retention_check_interval_ms == 300000
    assert c.offset_metadata_max_bytes == 4096
    assert c.offsets_retention_check_interval_ms == 600000
    assert c.offsets_retention_minutes == 1440


def test_time_unit_precedence():
    assert cfg(log_retention_hours=1).topic_config().retention_ms == 3600000
    assert cfg(log_retention_hours=1, log_retention_minutes=2).topic_config().retention_ms == 120000
    assert cfg(log_retention_minutes=2, log_retention_ms=5).topic_config().retention_ms == 5
    assert cfg(log_retention_ms=-7).topic_config().retention_ms == -1
    assert cfg(log_roll_hours=2).topic_config().segment_ms == 7200000
    assert cfg(log_roll_hours=2, log_roll_ms=9).topic_config().segment_ms == 9
    assert cfg(log_roll_jitter_hours=1).topic_config().segment_jitter_ms == 3600000
    assert cfg(log_flush_interval_ms=50).topic_config().flush_ms == 50


def test_log_dir_and_log_dirs():
    assert cfg(log_dir="/a").log_dirs == ("/a",)
    assert cfg(log_dir="/a", log_dirs="/b, /c").log_dirs == ("/b", "/c")


def test_listeners():
    c = cfg(listeners="PLAINTEXT://127.0.0.1:1234")
    assert (c.host, c.port, c.advertised_host, c.advertised_port) == (
        "127.0.0.1",
        1234,
        "127.0.0.1",
        1234,
    )
    c = cfg(listeners="PLAINTEXT://0.0.0.0:1234", advertised_listeners="PLAINTEXT://broker:9")
    assert (c.host, c.advertised_host, c.advertised_port) == ("0.0.0.0", "broker", 9)
    with pytest.raises(ConfigError) as e:
        cfg(listeners="SSL://x")
    assert e.value.key == "listeners"
    with pytest.raises(ConfigError) as e:
        cfg(listeners="PLAINTEXT://a:1,PLAINTEXT://b:2")
    assert e.value.key == "listeners"


@pytest.mark.parametrize(
    "key,value",
    [
        ("broker.id", "-1"),
        ("num.partitions", "0"),
        ("auto.create.topics.enable", "yes"),
        ("log.segment.bytes", "10"),
        ("log.segment.bytes", "3000000000"),
        ("log.message.timestamp.type", "NowTime"),
        ("log.message.format.version", "0.12.0"),
        ("log.index.size.max.bytes", "12"),
        ("socket.request.max.bytes", "0"),
        ("compression.type", "brotli"),
        ("log.cleanup.policy", "forever"),
        ("max.connections", "x"),
    ],
)
def test_invalid_values_name_the_key(key, value):
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties([(key, value)])
    assert e.value.key == key
    assert value in str(e.value) or key in str(e.value)


def test_unknown_key():
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties([("zookeeper.connection", "x:2181")])
    assert e.value.key == "zookeeper.connection" and "unknown" in e.value.reason


def test_zookeeper_connect():
    assert cfg(zookeeper_connect="a:1,b:2/kafka/x").zookeeper_connect == "a:1,b:2/kafka/x"
    assert cfg(log_dirs="/tmp/x").zookeeper_connect is None
    for bad in ("a", "a:1/", "a:1//x", "a:b", "a:1,/x"):
        with pytest.raises(ConfigError) as e:
            cfg(zookeeper_connect=bad)
        assert e.value.key == "zookeeper.connect"


def test_cluster_topic_configs():
    t = cfg(min_insync_replicas=2).topic_config({"unclean.leader.election.enable": "true"})
    assert t.min_insync_replicas == 2 and t.unclean_leader_election_enable is True
    assert cfg(log_dirs="/tmp/x").topic_config().unclean_leader_election_enable is False


def test_topic_configs_validated_and_normalised():
    got = parse_topic_configs(
        {
            "message.timestamp.type": "LogAppendTime",
            "max.message.time.difference.ms": " 1000 ",
            "cleanup.policy": "compact, delete",
            "message.format.version": "0.9.0.1",
        }
    )
    assert got == {
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.difference.max.ms": "1000",
        "cleanup.policy": "compact,delete",
        "message.format.version": "0.9.0",
    }
    t = TopicConfig.resolve(cfg().topic_defaults, got)
    assert t.message_timestamp_difference_max_ms == 1000 and t.magic == 0
    for bad in [
        {"retention.ms": "soon"},
        {"segment.bytes": "0"},
        {"no.such.key": "1"},
        {"message.timestamp.type": "createtime"},
        {"flush.messages": "0"},
        {"index.interval.bytes": "2147483648"},
    ]:
        with pytest.raises(ConfigError) as e:
            parse_topic_configs(bad)
        assert e.value.key == next(iter(bad))
    with pytest.raises(ConfigError):
        parse_topic_configs([("retention.ms", "1"), ("retention.ms", "2")])


def test_format_versions():
    assert format_magic("0.8.2") == 0 and format_magic("0.10.0-IV1") == 1
    assert format_magic("0.10.1") == 1 and format_magic("0.10.2-IV0") == 1
    assert format_magic("0.11.0-IV2") == 2 and format_magic("2.8") == 2
    assert format_magic("3.0-IV1") == 2 and format_magic("3.9-IV0") == 2


@pytest.mark.parametrize(
    "raw,canonical",
    [
        ("0.10.1.0", "0.10.1"),
        ("0.9.0.1", "0.9.0"),
        ("2.8.1", "2.8"),
        ("3.9.0", "3.9"),
        (" 3.0-IV1 ", "3.0-IV1"),
    ],
)
def test_format_version_release_numbers(raw, canonical):
    assert parse_topic_configs({"message.format.version": raw}) == {
        "message.format.version": canonical
    }


@pytest.mark.parametrize("raw", ["3.10", "0.11", "2.8-IV2", "0.10.1.x", "4.0-IV0", "1.0.0.0"])
def test_format_version_unknown(raw):
    with pytest.raises(ConfigError, match="'.*' is not a Kafka version"):
        parse_topic_configs({"message.format.version": raw})
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties(
            [("log.dirs", "/tmp/x"), ("inter.broker.protocol.version", raw)]
        )
    assert (
        e.value.key == "inter.broker.protocol.version" and "not a Kafka version" in e.value.reason
    )


@pytest.mark.parametrize(
    "raw,value",
    [
        ("2.0", "2.0"),
        ("2.1-IV0", "2.1-IV0"),
        ("0.11.0.2", "0.11.0"),
        ("2.8.1", "2.8"),
        (" 3.9 ", "3.9"),
    ],
)
def test_inter_broker_protocol_version(raw, value):
    assert (
        BrokerConfig.from_properties([("log.dirs", "/tmp/x")]).inter_broker_protocol_version
        == "3.9"
    )
    c = BrokerConfig.from_properties(
        [("log.dirs", "/tmp/x"), ("inter.broker.protocol.version", raw)]
    )
    assert c.inter_broker_protocol_version == value


def test_metadata_versions_are_ordered_as_kafkas():
    # a release named without -IVn is its last IV (MetadataVersion.fromVersionString)
    assert metadata_version_at_least("2.1", "2.1-IV2") and metadata_version_at_least(
        "2.1-IV2", "2.1"
    )
    assert not metadata_version_at_least("2.1-IV1", "2.1")
    assert not metadata_version_at_least("2.0", "2.1-IV0")
    assert metadata_version_at_least("2.1-IV0", "2.0") and metadata_version_at_least(
        "3.9", "2.3-IV0"
    )
    assert not metadata_version_at_least("0.9.0", "0.10.0-IV0")
    assert metadata_version_at_least("0.10.0-IV0", "0.9.0")


def test_message_format_newer_than_the_inter_broker_protocol_is_refused():
    # Kafka's KafkaConfig: the default log.message.format.version (3.0-IV1, record batches)
    # needs 0.11.0; a broker at 0.10.1 must lower both
    with pytest.raises(ConfigError) as e:
        BrokerConfig.from_properties(
            [("log.dirs", "/tmp/x"), ("inter.broker.protocol.version", "0.10.1")]
        )
    assert e.value.key == "log.message.format.version"
    assert "inter.broker.protocol.version is set to version 0.11.0 or higher" in e.value.reason
    c = BrokerConfig.from_properties(
        [
            ("log.dirs", "/tmp/x"),
            ("inter.broker.protocol.version", "0.10.1"),
            ("log.message.format.version", "0.10.1"),
        ]
    )
    assert c.topic_config().magic == 1
    with pytest.raises(ConfigError, match="version 0.10.0 or higher"):
        BrokerConfig.from_properties(
            [
                ("log.dirs", "/tmp/x"),
                ("inter.broker.protocol.version", "0.9.0"),
                ("log.message.format.version", "0.10.2"),
            ]
        )


def test_default_format_is_record_batches():
    c = BrokerConfig.from_properties([("log.dirs", "/tmp/x")])
    assert c.topic_defaults["message.format.version"] == "3.0-IV1"
    t = TopicConfig.resolve(c.topic_defaults, {})
    assert t.magic == 2
    t = TopicConfig.resolve(c.topic_defaults, {"message.format.version": "0.10.2"})
    assert t.magic == 1


def test_timestamp_before_after_max_ms():
    c = BrokerConfig.from_properties(
        [("log.dirs", "/tmp/x"), ("log.message.timestamp.before.max.ms", "5000")]
    )
    t = TopicConfig.resolve(c.topic_defaults, {"message.timestamp.after.max.ms": "60000"})
    assert (t.message_timestamp_before_max_ms, t.message_timestamp_after_max_ms) == (5000, 60000)


@pytest.mark.parametrize(
    "name,ok",
    [
        ("a", True),
        ("A-b_c.9", True),
        ("x" * 249, True),
        ("x" * 250, False),
        ("", False),
        (".", False),
        ("..", False),
        ("a/b", False),
        ("ä", False),
        ("a b", False),
    ],
)
def test_topic_names(name, ok):
    assert (topic_name_error(name) is None) == ok


def test_cli_exit_status_2_names_the_key(tmp_path):
    props = tmp_path / "s.properties"
    props.write_text("log.dirs=%s\nlog.retention.hours=lots\n" % tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--config", str(props)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "log.retention.hours" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--override", "bogus.key=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "bogus.key" in r.stderr


def test_cli_port_in_use_exits_1_with_a_reason(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "broker",
                "serve",
                "--override",
                f"listeners=PLAINTEXT://127.0.0.1:{port}",
                "--override",
                f"log.dirs={tmp_path}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 1
    assert "cannot start" in r.stderr and "port in use" in r.stderr


def test_zstd_needs_record_batches():
    c = BrokerConfig.from_properties([("log.dirs", "/tmp/x")])
    assert TopicConfig.resolve(c.topic_defaults, {"compression.type": "zstd"}).magic == 2
    with pytest.raises(ConfigError, match="zstd needs message.format.version"):
        TopicConfig.resolve(
            c.topic_defaults, {"compression.type": "zstd", "message.format.version": "0.10.2"}
        )


def test_metrics_listener():
    assert cfg().metrics_listener is None
    assert cfg(metrics_listener="").metrics_listener is None
    assert cfg(metrics_listener="http://127.0.0.1:9404").metrics_listener == ("127.0.0.1", 9404)
    assert cfg(metrics_listener="http://:0").metrics_listener == ("", 0)
    assert cfg(metrics_listener="http://[::1]:9404/").metrics_listener == ("::1", 9404)
    for bad, why in [
        ("https://127.0.0.1:9404", "scheme 'https' is not supported"),
        ("127.0.0.1:9404", "not of the form http://host:port"),
        ("http://127.0.0.1", "not of the form http://host:port"),
        ("http://127.0.0.1:9404/metrics", "not of the form http://host:port"),
        ("http://127.0.0.1:65536", "out of range"),
        ("http://bad host:1", "not of the form http://host:port"),
    ]:
        with pytest.raises(ConfigError) as e:
            cfg(metrics_listener=bad)
        assert e.value.key == "metrics.listener"
        assert why in e.value.reason
    with pytest.raises(ConfigError) as e:
        cfg(listeners="PLAINTEXT://127.0.0.1:9404", metrics_listener="http://127.0.0.1:9404")
    assert e.value.key == "metrics.listener"
    assert "Kafka listener" in e.value.reason
