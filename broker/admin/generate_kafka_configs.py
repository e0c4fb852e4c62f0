"""Generate broker/admin/kafka_configs.py from Kafka 4.1.1's own config definitions (run by hand).

    mvn dependency:get -Dartifact=org.apache.kafka:kafka_2.13:4.1.1
    python -m broker.admin.generate_kafka_configs --kafka-jars ~/.m2/repository

(or ``--kafka-jars build/jvm/lib`` after ``make kafka-jvm``) compiles a small Java program
against Kafka 4.1.1's jars (kafka_2.13 and the jars Maven brings with it), runs it, and writes what it prints as Python literals:
every broker property of ``AbstractKafkaConfig.CONFIG_DEF`` (KafkaConfig's definition), the
broker quotas of ``DynamicConfig.Broker``, and every
topic config of ``LogConfig.configKeys()`` (minus the internal ones), each with its type, default
(as ``ConfigDef.convertToString`` writes it), importance and the bounds or choices of its
validator; for broker properties also how AlterConfigs may change them
(``DynamicBrokerConfig.dynamicConfigUpdateModes``: per-broker, cluster-wide, else read-only;
per-listener for its DynamicSecurityConfigs, the key and trust stores);
and each topic config's broker synonyms with their unit (``ServerTopicConfigSynonyms``). Nothing
at run time needs Java or Kafka's jars.
"""

from __future__ import annotations

import argparse
import json
import pprint
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KAFKA_VERSION = "4.1.1"

# Prints one JSON document: {"broker": [...], "quota": [...], "topic": [...], "synonyms": {...}}.
_DUMPER = r"""
import java.lang.reflect.Field;
import java.util.*;
import org.apache.kafka.common.config.ConfigDef;
import org.apache.kafka.server.config.AbstractKafkaConfig;
import org.apache.kafka.server.config.ConfigSynonym;
import org.apache.kafka.server.config.ServerTopicConfigSynonyms;
import org.apache.kafka.storage.internals.log.LogConfig;

public class DumpConfigs {
    static String q(Object o) {
        if (o == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : o.toString().toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static Object field(Object o, String name) throws Exception {
        for (Class<?> c = o.getClass(); c != null; c = c.getSuperclass()) {
            try {
                Field f = c.getDeclaredField(name);
                f.setAccessible(true);
                return f.get(o);
            } catch (NoSuchFieldException e) { }
        }
        return null;
    }

    static String key(ConfigDef.ConfigKey k, String mode) throws Exception {
        String dflt = k.hasDefault() ? q(ConfigDef.convertToString(k.defaultValue, k.type)) : "null";
        String min = "null", max = "null", choices = "null";
        Object v = k.validator;
        if (v instanceof ConfigDef.ValidList) v = field(v, "validString");
        if (v instanceof ConfigDef.Range) {
            Object lo = field(v, "min"), hi = field(v, "max");
            min = lo == null ? "null" : q(lo);
            max = hi == null ? "null" : q(hi);
        } else if (v != null && field(v, "validStrings") != null) {
            List<String> names = new ArrayList<>();
            for (Object s : (Collection<?>) field(v, "validStrings")) names.add(q(s));
            choices = "[" + String.join(",", names) + "]";
        }
        return "{\"name\":" + q(k.name) + ",\"type\":" + q(k.type) + ",\"default\":" + dflt
            + ",\"has_default\":" + k.hasDefault() + ",\"importance\":" + q(k.importance)
            + ",\"min\":" + min + ",\"max\":" + max + ",\"choices\":" + choices
            + ",\"validator\":" + q(k.validator) + ",\"mode\":" + q(mode) + "}";
    }

    public static void main(String[] args) throws Exception {
        kafka.server.DynamicBrokerConfig$ dynamic = kafka.server.DynamicBrokerConfig$.MODULE$;
        Map<String, String> modes = dynamic.dynamicConfigUpdateModes();
        List<String> broker = new ArrayList<>();
        for (ConfigDef.ConfigKey k : new TreeMap<>(AbstractKafkaConfig.CONFIG_DEF.configKeys()).values()) {
            // the keystores and truststores: per broker, and only under a listener's prefix
            String mode = dynamic.DynamicSecurityConfigs().contains(k.name)
                ? "per-listener" : modes.getOrDefault(k.name, "read-only");
            if (!k.internalConfig) broker.add(key(k, mode));
        }
        // Broker quotas (DynamicConfig.Broker): AlterConfigs sets them per broker, KafkaConfig
        // does not define them.
        Class<?> quotas = Class.forName("kafka.server.DynamicConfig$Broker$");
        Object module = quotas.getField("MODULE$").get(null);
        @SuppressWarnings("unchecked")
        Map<String, ConfigDef.ConfigKey> quotaKeys =
            (Map<String, ConfigDef.ConfigKey>) quotas.getMethod("configKeys").invoke(module);
        List<String> quota = new ArrayList<>();
        for (ConfigDef.ConfigKey k : new TreeMap<>(quotaKeys).values())
            if (!AbstractKafkaConfig.CONFIG_DEF.names().contains(k.name)) quota.add(key(k, "per-broker"));
        List<String> topic = new ArrayList<>();
        for (ConfigDef.ConfigKey k : new TreeMap<>(LogConfig.configKeys()).values())
            if (!k.internalConfig) topic.add(key(k, null));
        List<String> synonyms = new ArrayList<>();
        for (Map.Entry<String, List<ConfigSynonym>> e
                : new TreeMap<>(ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS).entrySet()) {
            List<String> group = new ArrayList<>();
            for (ConfigSynonym s : e.getValue())
                group.add("[" + q(s.name()) + "," + s.converter().apply("1") + "]");
            synonyms.add(q(e.getKey()) + ":[" + String.join(",", group) + "]");
        }
        System.out.println("{\"broker\":[" + String.join(",", broker) + "],\"quota\":["
            + String.join(",", quota) + "],\"topic\":["
            + String.join(",", topic) + "],\"synonyms\":{" + String.join(",", synonyms) + "}}");
    }
}
"""


def _classpath(repository: Path) -> str:
    """Every jar of a flat folder holding Kafka's (build/jvm/lib, from ``make kafka-jvm``), or
    of a local Maven repository, Kafka's own only at KAFKA_VERSION."""
    if (repository / f"kafka_2.13-{KAFKA_VERSION}.jar").exists():
        return ":".join(str(jar) for jar in sorted(repository.glob("*.jar")))
    jars = []
    for jar in sorted(repository.rglob("*.jar")):
        if jar.name.endswith(("-sources.jar", "-javadoc.jar")):
            continue
        parts = jar.relative_to(repository).parts
        if parts[:3] == ("org", "apache", "kafka") and parts[-2] != KAFKA_VERSION:
            continue
        jars.append(str(jar))
    return ":".join(jars)


def dump(repository: Path) -> dict[str, Any]:
    """Kafka's definitions, as the Java program prints them."""
    classpath = _classpath(repository)
    with tempfile.TemporaryDirectory() as work:
        source = Path(work) / "DumpConfigs.java"
        source.write_text(_DUMPER)
        subprocess.run(["javac", "-cp", classpath, "-d", work, str(source)], check=True)
        out = subprocess.run(
            ["java", "-cp", f"{classpath}:{work}", "DumpConfigs"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def _entry(key: dict[str, Any]) -> tuple[Any, ...]:
    return (
        key["type"],
        key["default"] if key["has_default"] else None,
        key["importance"],
        None if key["min"] is None else _number(key["min"]),
        None if key["max"] is None else _number(key["max"]),
        tuple(key["choices"]) if key["choices"] is not None else None,
    )


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def render(doc: dict[str, Any]) -> str:
    broker = {k["name"]: (*_entry(k), k["mode"]) for k in doc["broker"]}
    quota = {k["name"]: (*_entry(k), k["mode"]) for k in doc["quota"]}
    topic = {k["name"]: _entry(k) for k in doc["topic"]}
    synonyms = {
        name: tuple((s[0], int(s[1])) for s in group) for name, group in doc["synonyms"].items()
    }

    def fmt(value: object) -> str:
        return pprint.pformat(value, width=100, sort_dicts=True)

    return f'''"""Every broker property and topic config Kafka {KAFKA_VERSION} defines: GENERATED by
broker/admin/generate_kafka_configs.py from Kafka's own definitions (AbstractKafkaConfig.CONFIG_DEF,
LogConfig, DynamicBrokerConfig, ServerTopicConfigSynonyms); do not edit.

BROKER: name -> (type, default, importance, minimum, maximum, choices, update mode), where type
is ConfigDef.Type's name, default the string ConfigDef.convertToString writes (None: null or no
default), minimum/maximum a Range validator's bounds, choices a ValidString's (or a ValidList's)
values, and update mode "per-broker", "cluster-wide" (AlterConfigs may change it),
"per-listener" (only under a ``listener.name.<listener>.`` prefix, per broker) or "read-only".
BROKER_QUOTAS: the broker quotas AlterConfigs sets per broker (DynamicConfig.Broker), which
KafkaConfig does not define, as BROKER. TOPIC: name -> the same first six. TOPIC_SYNONYMS:
topic config -> its broker properties in order, each with the number of milliseconds one of its
units holds (1 when it is not a time, 3600000 for an ``.hours`` property).
"""

BROKER = {fmt(broker)}

BROKER_QUOTAS = {fmt(quota)}

TOPIC = {fmt(topic)}

TOPIC_SYNONYMS = {fmt(synonyms)}
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--kafka-jars",
        type=Path,
        default=Path.home() / ".m2/repository",
        help=f"a Maven repository, or a folder of jars, holding Kafka {KAFKA_VERSION}'s kafka_2.13 "
        "and its dependencies",
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "kafka_configs.py"
    )
    args = parser.parse_args()
    args.out.write_text(render(dump(args.kafka_jars)))
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(args.out)], check=True)


if __name__ == "__main__":
    main()
