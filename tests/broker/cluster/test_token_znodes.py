"""The delegation token znodes in Kafka's ZooKeeper-mode format (broker/cluster/tokens.py,
Kafka 3.9's DelegationTokenManagerZk): what a Kafka broker wrote parses, what chronolog writes
is Kafka's (principals URL-encoded as Kafka 4.1.1's Sanitizer encodes them, checked against it
once by hand), and the HMAC is never written."""

from __future__ import annotations

import json

import pytest

from broker.cluster.tokens import desanitize, parse_token, sanitize, token_json
from broker.cluster.zk import ZkDataError
from broker.security.tokens import TokenInfo

TOKEN = TokenInfo(
    "QnwNFBsWR9eYbVyZrBMfnQ",
    "User:CN=svc b,O=x*",
    "User:alice",
    ("User:bob", "User:carol"),
    1_700_000_000_000,
    1_700_086_400_000,
    1_700_604_800_000,
)


def test_kafka_token_node_parses_and_reads_back():
    # as DelegationTokenInfoZNode.encode writes it (a Scala Map: any key order)
    kafka = (
        b'{"owner":"User%3ACN%3Dsvc%20b%2CO%3Dx%2A","renewers":["User%3Abob","User%3Acarol"],'
        b'"maxTimestamp":1700604800000,"tokenRequester":"User%3Aalice","version":3,'
        b'"expiryTimestamp":1700086400000,"issueTimestamp":1700000000000,'
        b'"tokenId":"QnwNFBsWR9eYbVyZrBMfnQ"}'
    )
    assert parse_token("/delegation_token/tokens/QnwNFBsWR9eYbVyZrBMfnQ", kafka) == TOKEN
    assert json.loads(token_json(TOKEN)) == json.loads(kafka)  # the same keys: no HMAC
    assert parse_token("/t", token_json(TOKEN)) == TOKEN


def test_older_versions_take_the_owner_as_requester():
    v2 = json.loads(token_json(TOKEN))
    del v2["tokenRequester"]
    v2["version"] = 2
    assert parse_token("/t", json.dumps(v2).encode()).requester == TOKEN.owner


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b'{"version":4}', json.dumps({"version": 3, "owner": "nocolon"}).encode()],
)
def test_unreadable_nodes_are_refused(data):
    with pytest.raises(ZkDataError):
        parse_token("/delegation_token/tokens/x", data)


def test_sanitize_is_kafkas():
    # outputs of org.apache.kafka.common.utils.Sanitizer in kafka-clients 4.1.1
    assert sanitize("User:alice") == "User%3Aalice"
    assert sanitize("User:CN=a b,O=x*") == "User%3ACN%3Da%20b%2CO%3Dx%2A"
    assert sanitize("User:é~+/") == "User%3A%C3%A9%7E%2B%2F"
    assert desanitize("a+b%20c") == "a b c"
    assert desanitize(sanitize("User:é~+/")) == "User:é~+/"
