"""Request handlers of the security apis, merged into the broker's dispatch table.

SaslHandshake v0-1 and SaslAuthenticate v0-2 (KIP-152) drive the connection's
:class:`~.sasl.SaslState` (from :data:`~.session.current_session`). On a listener without SASL,
or once authenticated (re-authentication, KIP-368, is not offered: the session lifetime is 0),
both answer ILLEGAL_SASL_STATE as Kafka's KafkaApis does. A handshake naming a mechanism that is
not enabled answers UNSUPPORTED_SASL_MECHANISM with the enabled ones, and the connection is
closed; a failed authentication answers SASL_AUTHENTICATION_FAILED after
connection.failed.authentication.delay.ms, and the connection is closed.

The ACL and SCRAM-credential apis are in :mod:`.admin_handlers`.
"""

from __future__ import annotations

import structlog

from broker.security.sasl import IllegalSaslState, SaslFailure
from broker.security.session import Session, current_session
from protocol.api import ApiKey, Request
from protocol.errors import ErrorCode

logger = structlog.get_logger(__name__)


def _sasl_session() -> Session | None:
    session = current_session.get()
    return session if session is not None and session.sasl is not None else None


async def handle_sasl_handshake(ctx, request: Request) -> dict:
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


async def handle_sasl_authenticate(ctx, request: Request) -> dict:
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


def _authenticate_answer(error: ErrorCode, message: str) -> dict:
    return {
        "error_code": int(error),
        "error_message": message,
        "auth_bytes": b"",
        "session_lifetime_ms": 0,
    }


SECURITY_HANDLERS = {
    ApiKey.SASL_HANDSHAKE: handle_sasl_handshake,
    ApiKey.SASL_AUTHENTICATE: handle_sasl_authenticate,
}
