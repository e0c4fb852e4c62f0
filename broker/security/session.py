"""A connection's security state, reachable from its handlers through :data:`current_session`."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from broker.security.principal import ANONYMOUS
from broker.security.settings import Listener

if TYPE_CHECKING:
    from broker.security.gate import SecurityGate
    from broker.security.sasl import SaslState


@dataclass(eq=False)
class Session:
    """Who is on one connection: its listener, peer, principal and SASL state. On a SASL
    listener ``sasl`` holds the exchange and the principal is set when it completes; elsewhere
    the principal is User:ANONYMOUS or the TLS client certificate's."""

    gate: SecurityGate
    listener: Listener
    peer: str  # "ip:port", for log lines
    host: str  # the peer's address as ACLs name hosts ("127.0.0.1")
    principal: str = ANONYMOUS
    sasl: SaslState | None = None
    close_reason: str | None = field(default=None)
    """Set by a handler whose answer must be the last one (a failed authentication)."""
    token_authenticated: bool = False
    """Authenticated with a delegation token (as its owner): such a session may not create,
    renew, expire or describe tokens (Kafka's KafkaPrincipal.tokenAuthenticated)."""

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.sasl.complete


current_session: ContextVar[Session | None] = ContextVar("current_session", default=None)
"""The session of the connection whose request is being handled (set once per connection task,
as broker.context.client_host); None outside a connection (in-process handler tests)."""
