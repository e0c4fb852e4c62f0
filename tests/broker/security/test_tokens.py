"""broker/security/tokens.py over the single broker's token file, with an injected clock: Kafka
4.1's lifetimes and refusals."""

from __future__ import annotations

import base64

import pytest

from broker.security.scram import MECHANISMS
from broker.security.tokens import DelegationTokens, TokenError, TokenFile, token_hmac
from protocol.errors import ErrorCode

DAY, WEEK = 86_400_000, 604_800_000


def _tokens(tmp_path, now: list[int], key: str | None = "k") -> DelegationTokens:
    return DelegationTokens(TokenFile(str(tmp_path)), key, WEEK, DAY, lambda: now[0])


async def test_lifetimes_renewals_and_expiry_follow_kafka(tmp_path):
    now = [1_000]
    tokens = _tokens(tmp_path, now)
    token, mac = await tokens.create("User:alice", "User:alice", ["User:bob"], -1)
    assert mac == token_hmac("k", token.token_id)
    assert (token.issue_ms, token.expiry_ms, token.max_ms) == (1_000, 1_000 + DAY, 1_000 + WEEK)
    short, _ = await tokens.create("User:alice", "User:alice", [], 3_000)  # below the broker's max
    assert (short.expiry_ms, short.max_ms) == (4_000, 4_000)

    now[0] += DAY // 2
    assert await tokens.renew(mac, "User:bob", -1) == now[0] + DAY  # the renewer, default period
    assert await tokens.renew(mac, "User:alice", 60_000) == now[0] + 60_000
    with pytest.raises(TokenError) as refused:
        await tokens.renew(mac, "User:carol", -1)
    assert refused.value.code == ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
    with pytest.raises(TokenError) as unknown:
        await tokens.renew(b"not a token", "User:alice", -1)
    assert unknown.value.code == ErrorCode.DELEGATION_TOKEN_NOT_FOUND

    assert await tokens.renew(mac, "User:alice", -1) == now[0] + DAY
    while now[0] + DAY < 1_000 + WEEK:  # renewed every half day up to the end of its life
        now[0] += DAY // 2
        await tokens.renew(mac, "User:alice", -1)
    assert await tokens.renew(mac, "User:alice", -1) == 1_000 + WEEK  # never past the maximum
    now[0] = 1_000 + WEEK + 1
    with pytest.raises(TokenError) as expired:
        await tokens.renew(mac, "User:alice", -1)
    assert expired.value.code == ErrorCode.DELEGATION_TOKEN_EXPIRED
    assert {t.token_id for t in await tokens.remove_expired()} == {token.token_id, short.token_id}
    assert tokens.describe(None) == []


async def test_expire_removes_or_shortens(tmp_path):
    now = [0]
    tokens = _tokens(tmp_path, now)
    token, mac = await tokens.create("User:alice", "User:alice", [], -1)
    assert await tokens.expire(mac, "User:alice", 5_000) == 5_000
    assert tokens.describe(["User:alice"])[0].expiry_ms == 5_000
    assert await tokens.expire(mac, "User:alice", -1) == 0
    assert tokens.describe(None) == []


async def test_scram_credentials_are_the_hmacs_and_refused_once_expired(tmp_path):
    now = [0]
    tokens = _tokens(tmp_path, now)
    token, mac = await tokens.create("User:alice", "User:alice", [], -1)
    mechanism = MECHANISMS["SCRAM-SHA-256"]
    credential, found = tokens.scram(token.token_id, mechanism)
    assert found == token
    password = base64.b64encode(mac).decode()
    salted = mechanism.salted_password(password, credential.salt, credential.iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    assert mechanism.digest(client_key) == credential.stored_key
    now[0] = DAY + 1
    assert tokens.scram(token.token_id, mechanism) is None


async def test_refusals_without_a_key_or_with_a_group_renewer(tmp_path):
    with pytest.raises(TokenError) as disabled:
        await _tokens(tmp_path, [0], key=None).create("User:a", "User:a", [], -1)
    assert disabled.value.code == ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
    with pytest.raises(TokenError) as bad:
        await _tokens(tmp_path, [0]).create("User:a", "User:a", ["Group:ops"], -1)
    assert bad.value.code == ErrorCode.INVALID_PRINCIPAL_TYPE
