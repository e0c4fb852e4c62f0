"""Request handlers of the security apis, merged into the broker's dispatch table.

SaslHandshake v0-1 and SaslAuthenticate v0-2 (KIP-152) drive the connection's
:class:`~.sasl.SaslState` (from :data:`~.session.current_session`). On a listener without SASL,
or once authenticated (re-authentication, KIP-368, is not offered: the session lifetime is 0),
both answer ILLEGAL_SASL_STATE as Kafka's KafkaApis does. A handshake naming a mechanism that is
not enabled answers UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection is
closed; a failed authentication answers SASL_AUTHENTICATION_FAILED after
connection.failed.authentication.delay.ms, and the connection is closed.

DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554) read and change the
credential store (:mod:`.credentials`); their authorization (DESCRIBE / ALTER on the cluster) is
:mod:`.rules`'. The ACL apis are in :mod:`.acl_handlers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import structlog


from broker import workers
from broker.security.acl_handlers import ACL_HANDLERS
from broker.security.token_handlers import TOKEN_HANDLERS
from broker.security.credentials import CredentialStore, Deletion, Upsertion
from broker.security.files import STATE_FILE_FAILURES, StateFileError
from broker.security.sasl import IllegalSaslState, SaslFailure
from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from broker.security.session import Session, current_session
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode

if TYPE_CHECKING:  # broker.context imports the security package
    from broker.context import BrokerContext
    from broker.handlers import Handler

logger = structlog.get_logger(__name__)


def _sasl_session() -> Session | None:
    session = current_session.get()
    return session if session is not None and session.sasl is not None else None


async def handle_sasl_handshake(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    session = _sasl_session()
    if session is None or session.sasl is None or session.sasl.complete:
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": []}
    sasl = session.sasl
    mechanism = request.body.mechanism
    enabled = list(sasl.mechanisms)
    try:
        ok = sasl.handshake(mechanism, request.header.api_version)
    except IllegalSaslState as exc:
        session.close_reason = str(exc)
        return {"error_code": int(ErrorCode.ILLEGAL_SASL_STATE), "mechanisms": enabled}
    if not ok:
        logger.warning(
            "SASL mechanism not enabled; closing the connection",
            peer=session.peer,
            listener=session.listener.name,
            mechanism=mechanism,
            enabled=enabled,
            action="set the client's sasl.mechanism to one of the enabled ones, or enable it "
            "with sasl.enabled.mechanisms",
        )
        session.close_reason = f"SASL mechanism {mechanism!r} is not enabled"
        return {"error_code": int(ErrorCode.UNSUPPORTED_SASL_MECHANISM), "mechanisms": enabled}
    return {"error_code": 0, "mechanisms": enabled}


async def handle_sasl_authenticate(ctx: BrokerContext, request: Request) -> dict[str, Any]:
    session = _sasl_session()
    if session is None or session.sasl is None or session.sasl.complete:
        return _authenticate_answer(
            ErrorCode.ILLEGAL_SASL_STATE,
            "SaslAuthenticate request received after successful authentication"
            if session is not None
            else "SASL authentication is not enabled on this listener",
        )
    sasl = session.sasl
    try:
        answer = sasl.authenticate(request.body.auth_bytes)
    except IllegalSaslState as exc:
        session.close_reason = str(exc)
        return _authenticate_answer(ErrorCode.ILLEGAL_SASL_STATE, str(exc))
    except SaslFailure as exc:
        await session.gate.failed(session, str(exc))
        return _authenticate_answer(ErrorCode.SASL_AUTHENTICATION_FAILED, str(exc))
    if sasl.complete:
        session.gate.authenticated(session)
    return {"error_code": 0, "error_message": None, "auth_bytes": answer, "session_lifetime_ms": 0}


def _authenticate_answer(error: ErrorCode, message: str) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "error_message": message,
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


def _store(ctx: BrokerContext) -> CredentialStore:
    session = current_session.get()
    if session is not None:
        return session.gate.credentials
    return CredentialStore(ctx.config.log_dirs[0])


async def handle_describe_user_scram_credentials(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    try:
        users = _store(ctx).users()
    except StateFileError as exc:
        logger.error("cannot read the SCRAM credentials", reason=str(exc))
        return {"error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR), "error_message": str(exc)}
    named = request.body.users
    wanted = sorted(users) if not named else [u.name for u in named]
    counts: dict[str, int] = {}
    for name in wanted:
        counts[name] = counts.get(name, 0) + 1
    results: list[dict[str, Any]] = []
    seen: set[str] = set()
    infos: list[dict[str, int]]
    for name in wanted:
        if name in seen:
            continue
        seen.add(name)
        if counts[name] > 1:
            error, message, infos = (
                ErrorCode.DUPLICATE_RESOURCE,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
                [],
            )
        elif not users.get(name):
            error, message, infos = (
                ErrorCode.RESOURCE_NOT_FOUND,
                "Attempt to describe a user credential that does not exist",
                [],
            )
        else:
            error, message = ErrorCode.NONE, None
            infos = [
                {"mechanism": SCRAM_MECHANISMS[m].type_id, "iterations": c.iterations}
                for m, c in sorted(users[name].items())
            ]
        results.append(
            {
                "user": name,
                "error_code": int(error),
                "error_message": message,
                "credential_infos": infos,
            }
        )
    return {"error_code": 0, "error_message": None, "results": results}


async def handle_alter_user_scram_credentials(
    ctx: BrokerContext, request: Request
) -> dict[str, Any]:
    body = request.body
    deletions = [Deletion(d.name, d.mechanism) for d in body.deletions]
    upsertions = [
        Upsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
        for u in body.upsertions
    ]
    store = _store(ctx)
    try:
        results = await workers.run_sync(store.alter, deletions, upsertions)
    except STATE_FILE_FAILURES as exc:
        logger.error(
            "cannot change the SCRAM credentials",
            path=store.path,
            error=str(exc),
            action="check the first log dir is writable and has space",
        )
        names = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
        return {
            "results": [
                {
                    "user": n,
                    "error_code": int(ErrorCode.UNKNOWN_SERVER_ERROR),
                    "error_message": str(exc),
                }
                for n in names
            ]
        }
    for result in results:
        if result.error == ErrorCode.NONE:
            logger.info("SCRAM credentials changed", user=result.user)
    return {
        "results": [
            {"user": r.user, "error_code": int(r.error), "error_message": r.message}
            for r in results
        ]
    }


SECURITY_HANDLERS: dict[ApiKey, Handler] = {
    **ACL_HANDLERS,
    **TOKEN_HANDLERS,
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
