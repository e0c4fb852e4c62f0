"""Produce v13 names topics by id (KIP-516): the WRITE check resolves each id to its topic, as
Kafka's KafkaApis does before authorizing, so a topic refused by name is refused by id too."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import trio

from broker.security.acls import AclBinding, AclFile, Operation, PatternType, Permission
from broker.security.acls import ResourceType
from broker.security.authorizer import Authorizer
from broker.security.principal import ANONYMOUS
from broker.security.rules import RULES, Check
from broker.security.session import Session
from broker.security.settings import Listener, SecuritySettings
from protocol import ApiKey, ClientConnection, ServerConnection

ORDERS, SECRET, UNKNOWN = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


class _Topics:
    names = {ORDERS: "orders", SECRET: "secret"}

    def by_id(self, topic_id):
        name = self.names.get(topic_id)
        return SimpleNamespace(name=name) if name is not None else None


def test_produce_v13_is_authorized_by_the_topic_an_id_names(tmp_path):
    store = AclFile(str(tmp_path))
    store.add(
        [
            AclBinding(
                ResourceType.TOPIC,
                "orders",
                PatternType.LITERAL,
                ANONYMOUS,
                "*",
                Operation.WRITE,
                Permission.ALLOW,
            ).validate()
        ]
    )
    authorizer = Authorizer(store, SecuritySettings(authorizer="x"))
    listener = Listener("PLAINTEXT", "PLAINTEXT", "", 9092, "h", 9092)
    session = Session(gate=None, listener=listener, peer="127.0.0.1:1", host="127.0.0.1")
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1000,
        "topic_data": [
            {"topic_id": t, "partition_data": [{"index": 0, "records": b""}]}
            for t in (ORDERS, SECRET, UNKNOWN)
        ],
    }
    _, frame = ClientConnection("t").request(ApiKey.PRODUCE, 13, body)
    (request,) = ServerConnection().receive_data(frame)
    handed: list[uuid.UUID] = []

    async def handler(ctx, request):
        handed.extend(e.topic_id for e in request.body.topic_data)
        return {"responses": [], "throttle_time_ms": 0}

    async def run():
        check = Check(authorizer, session, ApiKey.PRODUCE)
        return await RULES[ApiKey.PRODUCE](
            check, handler, SimpleNamespace(topics=_Topics()), request
        )

    answer = trio.run(run)
    # allowed, and unknown (the handler answers UNKNOWN_TOPIC_ID) go on; "secret" is refused
    assert handed == [ORDERS, UNKNOWN]
    (refused,) = answer["responses"]
    assert refused["topic_id"] == SECRET
    assert [(p["index"], p["error_code"]) for p in refused["partition_responses"]] == [(0, 29)]
