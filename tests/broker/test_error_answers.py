"""The authorization rules' refusals as Kafka 4.1 shapes them on the wire, at every version:
a refused Fetch partition carries an empty record set (never null, which librdkafka cannot
parse), a refused CreateTopics topic an empty config list, a refused config resource Kafka's
message. Each answer is encoded and decoded again, so what is checked is what a client
reads. The shapes come from Kafka 4.1.1's FetchResponse.partitionResponse, ControllerApis and
ConfigHelper (tests/integration/test_differential_errors.py compares with a running Kafka)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
import trio

from broker.security.acls import (
    AclBinding,
    AclFile,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from broker.security.authorizer import Authorizer
from broker.security.rules import RULES, Check
from broker.security.session import Session
from broker.security.settings import Listener, SecuritySettings
from protocol import ApiKey, ClientConnection, ServerConnection
from protocol.schemas import decode_response_body, encode_response_body

TOPIC_ID = uuid.UUID("0b7f5c6e-9a4e-4d61-8d1a-2f3c4b5a6d7e")


class _Topics:
    """One known topic, ``secret``."""

    def by_id(self, topic_id):
        return SimpleNamespace(name="secret") if topic_id == TOPIC_ID else None

    def __contains__(self, name):
        return name == "secret"


def _refused(tmp_path, api: ApiKey, version: int, body: dict) -> dict:
    """``body`` sent by a principal allowed nothing: the answer as a client decodes it."""
    authorizer = Authorizer(AclFile(str(tmp_path)), SecuritySettings(authorizer="x"))
    listener = Listener("PLAINTEXT", "PLAINTEXT", "", 9092, "h", 9092)
    session = Session(gate=None, listener=listener, peer="127.0.0.1:1", host="127.0.0.1")
    _, frame = ClientConnection("t").request(api, version, body)
    (request,) = ServerConnection(versions={api: (0, 99)}).receive_data(frame)
    ctx = SimpleNamespace(topics=_Topics(), config=SimpleNamespace(auto_create_topics_enable=False))

    async def handler(ctx, request):
        return {}

    async def run():
        return await RULES[api](Check(authorizer, session, api), handler, ctx, request)

    encoded = encode_response_body(api, version, trio.run(run))
    return decode_response_body(api, version, encoded, 0, len(encoded))


@pytest.mark.parametrize("version", range(0, 18))
def test_refused_fetch_partitions_carry_empty_records(tmp_path, version):
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": "secret",
                "topic_id": TOPIC_ID,
                "partitions": [{"partition": p, "fetch_offset": 0} for p in range(3)],
            }
        ],
    }
    answer = _refused(tmp_path, ApiKey.FETCH, version, body)
    (topic,) = answer.responses
    assert [p.partition_index for p in topic.partitions] == [0, 1, 2]
    for p in topic.partitions:
        assert p.error_code == 29  # TOPIC_AUTHORIZATION_FAILED
        assert p.records is not None and len(p.records) == 0
        assert (p.high_watermark, p.last_stable_offset, p.log_start_offset) == (-1, -1, -1)
        if version >= 4:
            assert p.aborted_transactions == []


@pytest.mark.parametrize("version", range(0, 18))
def test_refused_follower_fetch_carries_empty_records(tmp_path, version):
    """A replica's fetch without CLUSTER_ACTION: every partition refused, none null."""
    replica = {"replica_state": {"replica_id": 2, "replica_epoch": -1}} if version >= 15 else {}
    body = {
        "replica_id": 2,
        **replica,
        "topics": [{"topic": "secret", "topic_id": TOPIC_ID, "partitions": [{"partition": 0}]}],
    }
    answer = _refused(tmp_path, ApiKey.FETCH, version, body)
    (part,) = answer.responses[0].partitions
    assert part.error_code == 29 and part.records is not None and len(part.records) == 0


@pytest.mark.parametrize("version", range(5, 8))
def test_refused_create_topics_has_an_empty_config_list(tmp_path, version):
    body = {"topics": [{"name": "new", "num_partitions": 1, "replication_factor": 1}]}
    (topic,) = _refused(tmp_path, ApiKey.CREATE_TOPICS, version, body).topics
    assert (topic.error_code, topic.error_message) == (29, "Authorization failed.")
    assert topic.configs == [] and topic.topic_config_error_code == 0
    assert (topic.num_partitions, topic.replication_factor) == (-1, -1)


@pytest.mark.parametrize("version", range(0, 5))
def test_refused_describe_configs_says_why(tmp_path, version):
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "secret", "configuration_keys": None},
            {"resource_type": 4, "resource_name": "1", "configuration_keys": None},
        ]
    }
    results = _refused(tmp_path, ApiKey.DESCRIBE_CONFIGS, version, body).results
    assert [(r.error_code, r.error_message, r.configs) for r in results] == [
        (29, "Topic authorization failed.", []),
        (31, "Cluster authorization failed.", []),
    ]


@pytest.mark.parametrize(
    "api,versions",
    [(ApiKey.ALTER_CONFIGS, range(0, 3)), (ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1))],
)
def test_refused_alter_configs_says_why(tmp_path, api, versions):
    """Kafka 4.1's ControllerApis answers the error's text (Kafka 3.9's ZooKeeper mode: null)."""
    body = {"resources": [{"resource_type": 2, "resource_name": "secret", "configs": []}]}
    for version in versions:
        (result,) = _refused(tmp_path, api, version, body).responses
        assert (result.error_code, result.error_message) == (29, "Topic authorization failed.")


@pytest.mark.parametrize("version", [4, 11, 14, 15, 17])
def test_a_follower_with_cluster_action_needs_no_topic_acl(tmp_path, version):
    """KafkaApis.handleFetchRequest: a follower's fetch is authorized by CLUSTER_ACTION alone,
    so replication goes on for topics no one may READ (v15+ names the follower in
    replica_state, earlier versions in replica_id)."""
    store = AclFile(str(tmp_path))
    cluster_action = AclBinding(
        ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, "User:ANONYMOUS", "*",
        Operation.CLUSTER_ACTION, Permission.ALLOW,
    )  # fmt: skip
    store.add([cluster_action.validate()])
    authorizer = Authorizer(store, SecuritySettings(authorizer="x"))
    listener = Listener("PLAINTEXT", "PLAINTEXT", "", 9092, "h", 9092)
    session = Session(gate=None, listener=listener, peer="127.0.0.1:1", host="127.0.0.1")
    replica = {"replica_state": {"replica_id": 2, "replica_epoch": -1}} if version >= 15 else {}
    body = {
        "replica_id": 2,
        **replica,
        "topics": [{"topic": "secret", "topic_id": TOPIC_ID, "partitions": [{"partition": 0}]}],
    }
    _, frame = ClientConnection("t").request(ApiKey.FETCH, version, body)
    (request,) = ServerConnection(versions={ApiKey.FETCH: (0, 99)}).receive_data(frame)
    ctx = SimpleNamespace(topics=_Topics())
    seen = []

    async def handler(ctx, request):
        seen.append(request)
        return {"responses": []}

    async def run():
        check = Check(authorizer, session, ApiKey.FETCH)
        return await RULES[ApiKey.FETCH](check, handler, ctx, request)

    assert trio.run(run) == {"responses": []}
    assert seen == [request]  # the whole request, no topic taken out
