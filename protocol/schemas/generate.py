"""Generate protocol/schemas/definitions.py from Kafka's message definitions (run by hand).

    python -m protocol.schemas.generate --kafka-git PATH_TO_KAFKA_GIT --ref 3.9.0-rc3 \
        --kafka-jars ~/.m2/repository/org/apache/kafka

reads ``clients/src/main/resources/common/message/<Name>{Request,Response}.json`` for every api in
:data:`APIS` at ``--ref`` (through ``git show``, so a bare mirror works), and the same files of
the apis in :data:`KAFKA_4_APIS` from Kafka 4.1.1's own jars (kafka-clients and
kafka-transaction-coordinator carry their definitions as resources; ``mvn dependency:get
-Dartifact=org.apache.kafka:kafka-clients:4.1.1`` puts them under ``--kafka-jars``), strips their
``//`` comments and writes the definitions as Python literals. Nothing at run time reads JSON or
needs Kafka's sources; adding an api is a name in a list and a new run.

Kafka 4.0 dropped the oldest versions of many apis (KIP-896) without changing the fields of the
versions it kept (ListOffsets also dropped its v0-only fields). An api in :data:`WIDENED_APIS`
takes Kafka 4.1's definition with its valid versions reaching down to 3.9's first one again and
3.9's fields that only those dropped versions had put back where 3.9 has them; the generator
refuses to write unless every 3.9 version compiles to the very same codec from both definitions.
"""

from __future__ import annotations

import argparse
import json
import pprint
import subprocess
import zipfile
from pathlib import Path
from typing import Any

MESSAGE_DIR = "clients/src/main/resources/common/message"

# Kafka's message names (without Request/Response) of the apis chronolog has schemas for.
APIS = [
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "OffsetCommit",
    "OffsetFetch",
    "FindCoordinator",
    "JoinGroup",
    "Heartbeat",
    "LeaveGroup",
    "SyncGroup",
    "DescribeGroups",
    "ListGroups",
    "SaslHandshake",
    "ApiVersions",
    "CreateTopics",
    "DeleteTopics",
    "DeleteRecords",
    "InitProducerId",
    "DescribeConfigs",
    "AlterConfigs",
    "DescribeLogDirs",
    "SaslAuthenticate",
    "CreatePartitions",
    "DeleteGroups",
    "IncrementalAlterConfigs",
    "OffsetDelete",
    "DescribeCluster",
    "DescribeProducers",
    "CreateAcls",
    "DescribeAcls",
    "DeleteAcls",
    "DescribeUserScramCredentials",
    "AlterUserScramCredentials",
    "ElectLeaders",
    "AlterPartitionReassignments",
    "ListPartitionReassignments",
    # Inter-broker apis of the ZooKeeper-mode cluster (broker/cluster/).
    "LeaderAndIsr",
    "StopReplica",
    "UpdateMetadata",
    "ControlledShutdown",
    "OffsetForLeaderEpoch",
]

KAFKA_4_VERSION = "4.1.1"
# Apis (Request and Response) taken from Kafka 4.1.1's kafka-clients jar: the transaction apis
# (KIP-98, KIP-447, KIP-664, KIP-890, KIP-994), the client quota apis (KIP-546),
# DescribeTopicPartitions (KIP-966), UpdateFeatures (KIP-584), AlterReplicaLogDirs (KIP-113) and
# the delegation token apis (KIP-48, KIP-373).
KAFKA_4_APIS = [
    "DescribeTopicPartitions",
    "UpdateFeatures",
    "AddPartitionsToTxn",
    "AddOffsetsToTxn",
    "EndTxn",
    "WriteTxnMarkers",
    "TxnOffsetCommit",
    "DescribeTransactions",
    "ListTransactions",
    "DescribeClientQuotas",
    "AlterClientQuotas",
    "AlterReplicaLogDirs",
    "CreateDelegationToken",
    "RenewDelegationToken",
    "ExpireDelegationToken",
    "DescribeDelegationToken",
]
# Apis of APIS whose newer versions come from Kafka 4.1.1 (see the module docstring).
WIDENED_APIS = [
    "AlterPartitionReassignments",
    "InitProducerId",
    "Produce",
    "Fetch",
    "ListOffsets",
    "Metadata",
    "DescribeGroups",
    "DescribeCluster",
]
# Records of the internal __transaction_state topic, from kafka-transaction-coordinator's jar.
COORDINATOR_RECORDS = ["TransactionLogKey", "TransactionLogValue"]

# The keys of a field definition kept in the generated module ("about" is documentation).
_FIELD_KEYS = (
    "name",
    "type",
    "versions",
    "nullableVersions",
    "taggedVersions",
    "tag",
    "default",
    "ignorable",
    "fields",
)


def _strip_comments(text: str) -> str:
    """Drop // comments outside strings (the definitions have no // inside strings but
    URLs in "about" texts)."""
    out = []
    for line in text.splitlines():
        in_string = False
        cut = len(line)
        i = 0
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_string = not in_string
            elif not in_string and line.startswith("//", i):
                cut = i
                break
            i += 1
        out.append(line[:cut])
    return "\n".join(out)


def _field(f: dict[str, Any]) -> dict[str, Any]:
    kept = {k: f[k] for k in _FIELD_KEYS if k in f}
    if "fields" in kept:
        kept["fields"] = [_field(sub) for sub in kept["fields"]]
    return kept


def _message(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiKey": doc["apiKey"],
        "type": doc["type"],
        "name": doc["name"],
        "validVersions": doc["validVersions"],
        "flexibleVersions": doc["flexibleVersions"],
        "fields": [_field(f) for f in doc["fields"]],
        "commonStructs": [
            {
                "name": s["name"],
                "versions": s.get("versions", "0+"),
                "fields": [_field(f) for f in s["fields"]],
            }
            for s in doc.get("commonStructs", [])
        ],
    }


def _from_git(kafka_git: str, ref: str, name: str) -> dict[str, Any]:
    text = subprocess.run(
        ["git", "-C", kafka_git, "show", f"{ref}:{MESSAGE_DIR}/{name}.json"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return _message(json.loads(_strip_comments(text)))


def _from_jar(kafka_jars: Path, artifact: str, name: str) -> dict[str, Any]:
    jar = kafka_jars / artifact / KAFKA_4_VERSION / f"{artifact}-{KAFKA_4_VERSION}.jar"
    with zipfile.ZipFile(jar) as z:
        text = z.read(f"common/message/{name}.json").decode()
    return _message(json.loads(_strip_comments(text)))


def _versions(spec: str) -> tuple[int, int]:
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def _restore_dropped(
    old: list[dict[str, Any]], new: list[dict[str, Any]], new_lo: int
) -> list[dict[str, Any]]:
    """``new``'s fields with those of ``old`` that only versions below ``new_lo`` had (Kafka 4
    dropped them with the versions) put back after the field ``old`` has before them, nested
    structs merged the same way."""
    new_by_name = {f["name"]: f for f in new}
    merged = [dict(f) for f in new]
    for i, f in enumerate(old):
        kept = new_by_name.get(f["name"])
        if kept is not None:
            if "fields" in f and "fields" in kept:
                at = next(j for j, m in enumerate(merged) if m["name"] == f["name"])
                merged[at]["fields"] = _restore_dropped(f["fields"], kept["fields"], new_lo)
            continue
        lo, _, hi = f["versions"].partition("-")
        if f["versions"].endswith("+") or int(hi or lo) >= new_lo:
            continue  # a field of the versions both serve is not restored: the check fails
        prev = old[i - 1]["name"] if i else None
        at = next((j + 1 for j, m in enumerate(merged) if m["name"] == prev), 0)
        merged.insert(at, f)
    return merged


def _widen(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """``new`` valid from ``old``'s first version, after checking both compile the same there."""
    from protocol.schemas.codec import build_codec

    (old_lo, old_hi), (new_lo, new_hi) = (
        _versions(old["validVersions"]),
        _versions(new["validVersions"]),
    )
    widened = {
        **new,
        "validVersions": f"{min(old_lo, new_lo)}-{new_hi}",
        "fields": _restore_dropped(old["fields"], new["fields"], new_lo),
    }
    for version in range(old_lo, old_hi + 1):
        if build_codec(old, version).source != build_codec(widened, version).source:
            raise SystemExit(f"{new['name']} v{version} differs between 3.9 and {KAFKA_4_VERSION}")
    return widened


def load(kafka_git: str, ref: str, kafka_jars: Path) -> dict[str, dict[str, Any]]:
    messages = {}
    for api in APIS:
        for kind in ("Request", "Response"):
            message = _from_git(kafka_git, ref, f"{api}{kind}")
            if api in WIDENED_APIS:
                message = _widen(message, _from_jar(kafka_jars, "kafka-clients", f"{api}{kind}"))
            messages[message["name"]] = message
    for api in KAFKA_4_APIS:
        for kind in ("Request", "Response"):
            messages[f"{api}{kind}"] = _from_jar(kafka_jars, "kafka-clients", f"{api}{kind}")
    for name in COORDINATOR_RECORDS:
        messages[name] = _from_jar(kafka_jars, "kafka-transaction-coordinator", name)
    return messages


def render(messages: dict[str, dict[str, Any]], ref: str) -> str:
    body = pprint.pformat(messages, width=100, sort_dicts=False)
    return (
        f'"""Kafka\'s message definitions at {ref}, and those of the transaction apis, the newer '
        f"versions of\n{', '.join(WIDENED_APIS)}\nand the __transaction_state records at "
        f"{KAFKA_4_VERSION}: GENERATED by protocol/schemas/generate.py\nfrom {MESSAGE_DIR}/*.json; "
        f'do not edit.\n\nOne entry per message name, fields as in the JSON (minus "about" '
        f'texts).\n"""\n\nMESSAGES = {body}\n'
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-git", required=True, help="a clone or mirror of apache/kafka")
    parser.add_argument("--ref", default="3.9.0-rc3")
    parser.add_argument(
        "--kafka-jars",
        type=Path,
        default=Path.home() / ".m2/repository/org/apache/kafka",
        help="the org/apache/kafka folder of a Maven repository holding Kafka 4.1.1's jars",
    )
    args = parser.parse_args()
    out = Path(__file__).with_name("definitions.py")
    out.write_text(render(load(args.kafka_git, args.ref, args.kafka_jars), args.ref))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
