"""AclAuthorizer semantics (cases after Kafka's AclAuthorizerTest), ACL validation and filters,
the ACL file, and the per-api rules: every api key has one, and every rule's answers encode
at every version the schemas define (hypothesis requests, nothing allowed)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.security.acls import (
    AclBinding,
    AclFilter,
    AclFile,
    InvalidAclError,
    Operation as O,
    PatternType as P,
    Permission,
    ResourceType as R,
)
from broker.security.authorizer import Authorizer
from broker.security.rules import RULES, Check
from broker.security.session import Session
from broker.security.settings import Listener, SecuritySettings
from protocol import ApiKey, ClientConnection, ServerConnection
from protocol.schemas import REQUEST_SCHEMAS, encode_response_body
from tests.protocol.wire_strategies import value_strategy

ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(rtype, name, op, perm=ALLOW, principal="User:alice", host="*", pattern=P.LITERAL):
    return AclBinding(rtype, name, pattern, principal, host, op, perm).validate()


def authorizer(tmp_path, *bindings, **kw) -> Authorizer:
    store = AclFile(str(tmp_path))
    if bindings:
        store.add(bindings)
    return Authorizer(store, SecuritySettings(authorizer="x", **kw))


def test_literal_prefixed_wildcard_and_deny(tmp_path):
    a = authorizer(
        tmp_path,
        acl(R.TOPIC, "orders", O.READ),
        acl(R.TOPIC, "logs-", O.WRITE, pattern=P.PREFIXED),
        acl(R.TOPIC, "*", O.DESCRIBE, principal="User:bob"),
        acl(R.TOPIC, "logs-secret", O.ALL, DENY),
        acl(R.GROUP, "g", O.READ, host="10.0.0.1"),
    )
    alice = lambda op, rtype, name, host="127.0.0.1": a.authorize(  # noqa: E731
        "User:alice", host, op, rtype, name
    )
    assert alice(O.READ, R.TOPIC, "orders")
    assert alice(O.DESCRIBE, R.TOPIC, "orders")  # implied by READ
    assert not alice(O.WRITE, R.TOPIC, "orders")
    assert not alice(O.READ, R.TOPIC, "orders2")  # literal is exact
    assert alice(O.WRITE, R.TOPIC, "logs-app")
    assert not alice(O.WRITE, R.TOPIC, "logs")  # shorter than the prefix
    assert not alice(O.WRITE, R.TOPIC, "logs-secret")  # DENY wins
    assert not alice(O.DESCRIBE, R.TOPIC, "logs-secret")
    assert a.authorize("User:bob", "1.2.3.4", O.DESCRIBE, R.TOPIC, "anything")
    assert not a.authorize("User:bob", "1.2.3.4", O.READ, R.TOPIC, "anything")
    assert alice(O.READ, R.GROUP, "g", host="10.0.0.1")
    assert not alice(O.READ, R.GROUP, "g")  # other host
    assert not alice(O.DESCRIBE_CONFIGS, R.TOPIC, "orders")


def test_implied_operations_do_not_cross(tmp_path):
    a = authorizer(tmp_path, acl(R.TOPIC, "t", O.ALTER_CONFIGS), acl(R.TOPIC, "u", O.DESCRIBE))
    assert a.authorize("User:alice", "h", O.DESCRIBE_CONFIGS, R.TOPIC, "t")
    assert not a.authorize("User:alice", "h", O.DESCRIBE, R.TOPIC, "t")
    assert not a.authorize("User:alice", "h", O.READ, R.TOPIC, "u")  # not the other way round


def test_transactional_ids(tmp_path):
    a = authorizer(
        tmp_path,
        acl(R.TRANSACTIONAL_ID, "app-", O.WRITE, pattern=P.PREFIXED),
        acl(R.TRANSACTIONAL_ID, "app-audit", O.WRITE, DENY),
        acl(R.TRANSACTIONAL_ID, "ops", O.DESCRIBE),
    )
    alice = lambda op, name: a.authorize("User:alice", "h", op, R.TRANSACTIONAL_ID, name)  # noqa: E731
    assert alice(O.WRITE, "app-1") and alice(O.DESCRIBE, "app-1")  # WRITE implies DESCRIBE
    # a DENY of WRITE denies only WRITE: DESCRIBE is still implied by the prefixed ALLOW
    assert not alice(O.WRITE, "app-audit") and alice(O.DESCRIBE, "app-audit")
    assert alice(O.DESCRIBE, "ops") and not alice(O.WRITE, "ops")
    assert not a.authorize("User:alice", "h", O.WRITE, R.TOPIC, "app-1")  # another resource type


def test_wildcard_principal_and_deny_all(tmp_path):
    a = authorizer(
        tmp_path,
        acl(R.TOPIC, "t", O.READ, principal="User:*"),
        acl(R.TOPIC, "t", O.READ, DENY, principal="User:mallory"),
    )
    assert a.authorize("User:anyone", "h", O.READ, R.TOPIC, "t")
    assert not a.authorize("User:mallory", "h", O.READ, R.TOPIC, "t")


def test_super_users_and_allow_everyone_if_no_acl_found(tmp_path):
    a = authorizer(
        tmp_path,
        acl(R.TOPIC, "t", O.READ, DENY, principal="User:*"),
        super_users=frozenset({"User:admin"}),
        allow_everyone_if_no_acl_found=True,
    )
    assert a.authorize("User:admin", "h", O.READ, R.TOPIC, "t")  # super users skip DENY
    assert not a.authorize("User:x", "h", O.READ, R.TOPIC, "t")
    assert a.authorize("User:x", "h", O.WRITE, R.TOPIC, "no-acls-here")
    strict = authorizer(tmp_path / "s")
    (tmp_path / "s").mkdir(exist_ok=True)
    assert not strict.authorize("User:x", "h", O.WRITE, R.TOPIC, "no-acls-here")


def test_authorize_any_topic_for_idempotent_write(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = authorizer(tmp_path / "a", acl(R.TOPIC, "x-", O.WRITE, pattern=P.PREFIXED))
    assert a.authorize_any("User:alice", "h", O.WRITE, R.TOPIC)
    assert not a.authorize_any("User:bob", "h", O.WRITE, R.TOPIC)
    b = authorizer(
        tmp_path / "b",
        acl(R.TOPIC, "x-", O.WRITE, pattern=P.PREFIXED),
        acl(R.TOPIC, "x", O.WRITE, DENY, pattern=P.PREFIXED),
    )
    assert not b.authorize_any("User:alice", "h", O.WRITE, R.TOPIC)


def test_authorized_operations_bits(tmp_path):
    a = authorizer(tmp_path, acl(R.TOPIC, "t", O.READ))
    bits = a.authorized_operations("User:alice", "h", R.TOPIC, "t")
    assert bits == (1 << O.READ) | (1 << O.DESCRIBE)


@pytest.mark.parametrize(
    "binding",
    [
        (R.ANY, "t", P.LITERAL, "User:a", "*", O.READ, ALLOW),
        (R.TOPIC, "t", P.MATCH, "User:a", "*", O.READ, ALLOW),
        (R.TOPIC, "", P.LITERAL, "User:a", "*", O.READ, ALLOW),
        (R.CLUSTER, "other", P.LITERAL, "User:a", "*", O.ALTER, ALLOW),
        (R.TOPIC, "t", P.LITERAL, "alice", "*", O.READ, ALLOW),
        (R.TOPIC, "t", P.LITERAL, "User:a", "*", O.ANY, ALLOW),
        (R.TOPIC, "t", P.LITERAL, "User:a", "*", O.READ, Permission.ANY),
        (R.TOPIC, "t", P.LITERAL, "User:a", "*", O.IDEMPOTENT_WRITE, ALLOW),
        (R.GROUP, "g", P.LITERAL, "User:a", "*", O.WRITE, ALLOW),
        (R.TRANSACTIONAL_ID, "tx", P.LITERAL, "User:a", "*", O.READ, ALLOW),
    ],
)
def test_invalid_bindings(binding):
    with pytest.raises(InvalidAclError):
        AclBinding(*binding).validate()


def test_filters(tmp_path):
    lit = acl(R.TOPIC, "orders", O.READ)
    pre = acl(R.TOPIC, "ord", O.WRITE, pattern=P.PREFIXED)
    star = acl(R.TOPIC, "*", O.DESCRIBE)
    other = acl(R.GROUP, "orders", O.READ)
    everything = [lit, pre, star, other]
    match = AclFilter(R.TOPIC, "orders", P.MATCH)
    assert [b for b in everything if match.matches(b)] == [lit, pre, star]
    assert [b for b in everything if AclFilter(R.TOPIC, "orders").matches(b)] == [lit]
    assert [b for b in everything if AclFilter(pattern_type=P.PREFIXED).matches(b)] == [pre]
    assert [b for b in everything if AclFilter().matches(b)] == everything
    assert [b for b in everything if AclFilter(operation=O.READ).matches(b)] == [lit, other]


def test_acl_file_is_private_and_shared_with_the_cli(tmp_path):
    store = AclFile(str(tmp_path))
    store.add([acl(R.TOPIC, "t", O.READ)])
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "broker", "acls", "--log-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    added = cli("add", "--allow-principal", "User:bob", "--operation", "Write",
                "--operation", "Describe", "--topic", "logs-", "--prefixed")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert len(store.bindings()) == 3  # the loaded store sees the CLI's change
    listed = cli("list", "--topic", "logs-", "--prefixed").stdout
    assert "principal=User:bob" in listed and "TOPIC:PREFIXED:logs-" in listed
    assert cli("add", "--allow-principal", "User:bob", "--operation", "IdempotentWrite",
               "--topic", "x").returncode == 1  # fmt: skip
    removed = cli("remove", "--topic", "logs-", "--prefixed", "--operation", "Write")
    assert "removed" in removed.stdout and len(store.bindings()) == 2
    assert cli("remove", "--cluster").stdout.strip() == "no ACL matched"


# -- rules ------------------------------------------------------------------------------


def test_every_api_key_has_a_rule():
    assert set(ApiKey) <= set(RULES)


AUTH_ERRORS = {29, 30, 31, 53}
ALL_VERSIONS = [
    (api, v)
    for api in sorted(ApiKey)
    for v in range(0, 20)
    if (api, v) in REQUEST_SCHEMAS and api in RULES
]


def _session() -> Session:
    listener = Listener("PLAINTEXT", "PLAINTEXT", "", 9092, "h", 9092)
    return Session(gate=None, listener=listener, peer="127.0.0.1:1", host="127.0.0.1")


@pytest.mark.parametrize("api,version", ALL_VERSIONS, ids=str)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_rule_answers_encode_at_every_version(tmp_path_factory, api, version, data):
    """With nothing allowed, whatever a rule answers (its own error answer, or a handler's
    empty answer with the refused entries added back) encodes at the request's version."""
    value = data.draw(value_strategy(REQUEST_SCHEMAS[api, version], max_items=2))
    if api == ApiKey.PRODUCE:
        value["acks"] = -1
    _, frame = ClientConnection("t").request(api, version, value)
    # decode every version the schemas define
    (request,) = ServerConnection(versions={api: (0, 99)}).receive_data(frame)
    tmp = tmp_path_factory.mktemp("acl")
    check = Check(authorizer(tmp), _session(), api)
    ctx = SimpleNamespace(topics=_Topics(), config=SimpleNamespace(auto_create_topics_enable=True))

    async def handler(ctx, request):
        return {}

    async def run():
        return await RULES[api](check, handler, ctx, request)

    answer = trio.run(run)
    if answer is not None:
        encode_response_body(api, version, answer)


class _Topics:
    def by_id(self, topic_id):
        return None

    def __contains__(self, name):
        return False
