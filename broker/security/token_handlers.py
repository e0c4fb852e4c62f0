"""CreateDelegationToken, RenewDelegationToken, ExpireDelegationToken and DescribeDelegationToken
(api keys 38-41, KIP-48 and KIP-373), answered as Kafka 4.1's KafkaApis and controller answer
them (broker/security/tokens.py has the tokens and their rules).

Their authorization is here rather than in the per-api rules (rules.py lets them through):
Kafka's depends on the token itself. Creating a token for another owner needs CREATE_TOKENS on
that user (else DELEGATION_TOKEN_AUTHORIZATION_FAILED); describing shows a principal the tokens
it owns or renews, and others only with DESCRIBE on the token or DESCRIBE_TOKENS on its owner.
No token api is served to a session authenticated with a token, on a PLAINTEXT listener, or on
an SSL listener without a client certificate (DELEGATION_TOKEN_REQUEST_NOT_ALLOWED). The token
store (a file, or ZooKeeper in a cluster) is written off the event loop.
"""

from __future__ import annotations

from typing import Any

import structlog

from broker.context import BrokerContext
from broker.security.acls import Operation, ResourceType
from broker.security.principal import ANONYMOUS
from broker.security.session import Session, current_session
from broker.security.tokens import DelegationTokens, TokenError, TokenInfo, TokenStoreError
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)

ERROR_TIMESTAMP = -1  # Kafka's DelegationTokenManager.ErrorTimestamp


def _session() -> Session:
    session = current_session.get()
    assert session is not None, "token apis are served on a connection"
    return session


def _allows_token_requests(session: Session) -> bool:
    """Kafka's allowTokenRequests."""
    protocol = session.listener.protocol
    return not (
        session.token_authenticated
        or protocol == "PLAINTEXT"
        or (protocol == "SSL" and session.principal == ANONYMOUS)
    )


def _authorized(session: Session, operation: Operation, kind: ResourceType, name: str) -> bool:
    authorizer = session.gate.authorizer
    return authorizer is None or authorizer.authorize(
        session.principal, session.host, operation, kind, name
    )


def _split(principal: str) -> tuple[str, str]:
    kind, _, name = principal.partition(":")
    return kind, name


async def _write(call: Any, *args: Any) -> Any:
    """A token change (``call(*args)``, a DelegationTokens method); a store that could not be
    written is logged and answered as Kafka answers an unexpected failure."""
    try:
        return await call(*args)
    except TokenStoreError as exc:
        logger.error("delegation token change not saved", error=str(exc))
        raise TokenError(ErrorCode.UNKNOWN_SERVER_ERROR) from None


async def handle_create_delegation_token(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    body = request.body
    session = _session()
    requester = session.principal
    owner_name = body.get("owner_principal_name")
    owner = f"{body.owner_principal_type}:{owner_name}" if owner_name else requester
    answer: dict[str, Any] = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "principal_type": _split(owner)[0],
        "principal_name": _split(owner)[1],
        "token_requester_principal_type": _split(requester)[0],
        "token_requester_principal_name": _split(requester)[1],
        "issue_timestamp_ms": ERROR_TIMESTAMP,
        "expiry_timestamp_ms": ERROR_TIMESTAMP,
        "max_timestamp_ms": ERROR_TIMESTAMP,
        "token_id": "",
        "hmac": b"",
    }
    tokens = session.gate.tokens
    if not _allows_token_requests(session):
        answer["error_code"] = int(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
    elif owner != requester and not _authorized(
        session, Operation.CREATE_TOKENS, ResourceType.USER, owner
    ):
        answer["error_code"] = int(ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED)
    else:
        renewers = [f"{r.principal_type}:{r.principal_name}" for r in body.renewers]
        try:
            token, mac = await _write(tokens.create, owner, requester, renewers,
                                      body.max_lifetime_ms)  # fmt: skip
        except TokenError as exc:
            answer["error_code"] = int(exc.code)
        else:
            logger.info(
                "delegation token created",
                token_id=token.token_id,
                owner=owner,
                requester=requester,
                renewers=list(token.renewers),
            )
            answer.update(
                issue_timestamp_ms=token.issue_ms,
                expiry_timestamp_ms=token.expiry_ms,
                max_timestamp_ms=token.max_ms,
                token_id=token.token_id,
                hmac=mac,
            )
    return answer


async def _renew_or_expire(request: Request, expire: bool) -> dict[str, Any]:
    body = request.body
    session = _session()
    tokens = session.gate.tokens
    if not _allows_token_requests(session):
        code = ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
    else:
        call = tokens.expire if expire else tokens.renew
        period = body.expiry_time_period_ms if expire else body.renew_period_ms
        try:
            expiry = await _write(call, bytes(body.hmac), session.principal, period)
        except TokenError as exc:
            code = exc.code
        else:
            return {"throttle_time_ms": 0, "error_code": 0, "expiry_timestamp_ms": expiry}
    return {"throttle_time_ms": 0, "error_code": int(code), "expiry_timestamp_ms": ERROR_TIMESTAMP}


async def handle_renew_delegation_token(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await _renew_or_expire(request, expire=False)


async def handle_expire_delegation_token(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    return await _renew_or_expire(request, expire=True)


def _described(tokens: DelegationTokens, token: TokenInfo) -> dict[str, Any]:
    owner_type, owner_name = _split(token.owner)
    requester_type, requester_name = _split(token.requester)
    return {
        "principal_type": owner_type,
        "principal_name": owner_name,
        "token_requester_principal_type": requester_type,
        "token_requester_principal_name": requester_name,
        "issue_timestamp": token.issue_ms,
        "expiry_timestamp": token.expiry_ms,
        "max_timestamp": token.max_ms,
        "token_id": token.token_id,
        "hmac": tokens.hmac_of(token),
        "renewers": [
            {"principal_type": _split(r)[0], "principal_name": _split(r)[1]} for r in token.renewers
        ],
    }


async def handle_describe_delegation_token(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    session = _session()
    tokens = session.gate.tokens
    answer: dict[str, Any] = {"throttle_time_ms": 0, "error_code": 0, "tokens": []}
    if not _allows_token_requests(session):
        answer["error_code"] = int(ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
        return answer
    if not tokens.enabled:
        answer["error_code"] = int(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        return answer
    owners = request.body.owners
    wanted = None if owners is None else [f"{o.principal_type}:{o.principal_name}" for o in owners]
    if wanted == []:
        return answer
    answer["tokens"] = [
        _described(tokens, t)
        for t in tokens.describe(wanted)
        if t.owner_or_renewer(session.principal)
        or _authorized(session, Operation.DESCRIBE, ResourceType.DELEGATION_TOKEN, t.token_id)
        or _authorized(session, Operation.DESCRIBE_TOKENS, ResourceType.USER, t.owner)
    ]
    return answer


TOKEN_HANDLERS: dict[ApiKey, Any] = {
    ApiKey.CREATE_DELEGATION_TOKEN: handle_create_delegation_token,
    ApiKey.RENEW_DELEGATION_TOKEN: handle_renew_delegation_token,
    ApiKey.EXPIRE_DELEGATION_TOKEN: handle_expire_delegation_token,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: handle_describe_delegation_token,
}

__all__ = ["TOKEN_HANDLERS"]
