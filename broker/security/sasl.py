"""The SASL side of one connection, sans-IO, as Kafka's SaslServerAuthenticator runs it.

States: ``handshake`` (ApiVersions and SaslHandshake answered, nothing else) -> ``authenticate``
(the mechanism chosen: SaslAuthenticate tokens, or raw token frames after a SaslHandshake v0)
-> ``complete`` (the principal is known; every api is served) or ``failed`` (the connection is
closed after the answer). Mechanisms: PLAIN (RFC 4616, users from the listener's JAAS config)
and SCRAM-SHA-256/512 (:mod:`.scram`, users from the credential store).
"""

from __future__ import annotations

import hmac
from typing import Callable, Mapping

from broker.security.scram import MECHANISMS as SCRAM_MECHANISMS
from broker.security.scram import Credential, Mechanism, ScramError, ScramServer


class SaslFailure(Exception):
    """Raised when an authentication fails; ``str()`` is safe to log and to send to the client
    (Kafka's SaslAuthenticationException messages), never a password."""


class IllegalSaslState(Exception):
    """Raised for a SASL request the state does not allow (e.g. SaslAuthenticate before the
    handshake); the connection is closed."""


class PlainServer:
    """PLAIN (RFC 4616): ``[authzid] NUL authcid NUL passwd`` against ``users`` {name: password},
    as Kafka's PlainSaslServer with PlainServerCallbackHandler."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("Authentication failed: unexpected token after completion")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Authentication failed: token is not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, username, password = parts
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        self.username = username  # for the failure's log line too
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        expected = self._users.get(username)
        # Compare even for an unknown user, so timing does not tell which users exist.
        ok = hmac.compare_digest(
            password.encode("utf-8"), (expected if expected is not None else "\0").encode("utf-8")
        )
        if not ok or expected is None:
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.complete = True
        return b""


class SaslState:
    """One connection's authentication. ``lookup(user, mechanism)`` finds SCRAM credentials,
    ``token_lookup(token_id, mechanism)`` a delegation token's (credential, owner);
    ``plain_users`` are the listener's PLAIN users; ``decoy_key`` see ScramServer."""

    def __init__(
        self,
        mechanisms: tuple[str, ...],
        plain_users: Mapping[str, str],
        lookup: Callable[[str, Mechanism], Credential | None],
        decoy_key: bytes,
        token_lookup: Callable[[str, Mechanism], tuple[Credential, str] | None] = (
            lambda _token, _mechanism: None
        ),
    ) -> None:
        self.mechanisms = mechanisms
        self._plain_users = plain_users
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._decoy_key = decoy_key
        # The owner of the delegation token a SCRAM exchange authenticated with, if one did.
        self.token_owner: str | None = None
        self.state = "handshake"
        self.mechanism: str | None = None
        self.raw_tokens = False
        self.username: str | None = None
        self._server: PlainServer | ScramServer | None = None

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    def handshake(self, mechanism: str, version: int) -> bool:
        """A SaslHandshake: True when ``mechanism`` is enabled (state ``authenticate``; after v0
        the tokens come as raw frames), False otherwise (state ``failed``). Raises
        IllegalSaslState outside state ``handshake``."""
        if self.state != "handshake":
            raise IllegalSaslState(f"SaslHandshake received in state {self.state}")
        if mechanism not in self.mechanisms:
            self.state = "failed"
            self.mechanism = mechanism
            return False
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism == "PLAIN":
            self._server = PlainServer(self._plain_users)
        else:
            scram = SCRAM_MECHANISMS[mechanism]
            self._server = ScramServer(
                scram,
                lambda user: self._lookup(user, scram),
                self._decoy_key,
                token_lookup=lambda token_id: self._token_lookup(token_id, scram),
            )
        self.state = "authenticate"
        return True

    def authenticate(self, token: bytes) -> bytes:
        """The answer to one client token; raises SaslFailure (state ``failed``) or
        IllegalSaslState (no mechanism chosen yet, or already complete)."""
        if self.state != "authenticate" or self._server is None:
            raise IllegalSaslState(f"SASL token received in state {self.state}")
        server = self._server
        self.state = "failed"  # until this token succeeded
        try:
            answer = server.evaluate(token)
        except (ScramError, SaslFailure) as exc:
            self.username = server.username
            raise SaslFailure(str(exc)) from None
        self.username = server.username
        if isinstance(server, ScramServer):
            self.token_owner = server.token_owner
        self.state = "complete" if server.complete else "authenticate"
        if server.complete:
            self.raw_tokens = False
        return answer
