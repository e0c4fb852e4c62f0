"""What the server calls for security: per connection, then per request.

:meth:`SecurityGate.open` runs a TLS listener's handshake (refusing untrusted client
certificates), takes the principal from a client certificate and makes the connection's
:class:`~.session.Session`. :meth:`SecurityGate.admit` refuses, by closing the connection, every
request but ApiVersions, SaslHandshake and SaslAuthenticate until a SASL listener's client has
authenticated (as Kafka's SaslServerAuthenticator). :meth:`SecurityGate.call` runs a handler
with the per-api authorization rules (:mod:`.rules`) when an authorizer is configured, and
gives clients the addresses of the listener they came in on (Metadata, FindCoordinator,
DescribeCluster). :meth:`SecurityGate.raw_token` answers the raw token frames that follow a
SaslHandshake v0.
"""

from __future__ import annotations

import secrets
import ssl
from typing import Any, Awaitable, Callable

import structlog
import trio

from broker.errors import CloseConnectionError, StartupError
from broker.security import rules
from broker.security.acls import AclStore
from broker.security.authorizer import Authorizer
from broker.security.credentials import CredentialStore
from broker.security.files import StateFileError
from broker.security.principal import NoMatchingRuleError, PrincipalMapper, distinguished_name
from broker.security.sasl import IllegalSaslState, SaslFailure, SaslState
from broker.security.scram import Credential, Mechanism
from broker.security.session import Session
from broker.security.settings import Listener
from broker.security.tls import TlsSetupError, server_context
from broker.security.tokens import DelegationTokens, TokenStoreError
from broker.streams import PlainSocketStream
from protocol.api import ApiKey, Request

logger = structlog.get_logger(__name__)

TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS client has this long to finish its handshake (it holds a connection slot meanwhile)."""

BEFORE_AUTHENTICATION = frozenset(
    {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
)
"""The apis a SASL listener answers before the client has authenticated."""

Handler = Callable[[Any, Request], Awaitable[Any]]


class SecurityGate:
    """The broker's security state: TLS contexts, SCRAM credentials, ACLs and authorizer. Made
    once per broker; raises StartupError when a listener's TLS stores cannot be loaded."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        config = ctx.config
        self.settings = config.security
        self._tls: dict[str, ssl.SSLContext] = {}
        try:
            for listener in config.listeners:
                if listener.tls is not None:
                    self._tls[listener.name] = server_context(listener.name, listener.tls)
        except TlsSetupError as exc:
            raise StartupError(str(exc)) from None
        self._mappers = {
            listener.name: PrincipalMapper(listener.principal_rules)
            for listener in config.listeners
        }
        self.credentials = CredentialStore(config.log_dirs[0])
        self.tokens = DelegationTokens(
            ctx.token_store,  # the token file, or ZooKeeper in a cluster
            config.delegation_token_secret_key,
            config.delegation_token_max_lifetime_ms,
            config.delegation_token_expiry_time_ms,
            ctx.clock,
        )
        self.decoy_key = secrets.token_bytes(32)
        self.acls: AclStore = ctx.acls  # the ACL file, or ZooKeeper in a cluster
        self.authorizer: Authorizer | None = None
        if self.settings.authorizes:
            try:
                count = len(self.acls.bindings())  # a damaged file stops the start
            except StateFileError as exc:
                raise StartupError(str(exc)) from None
            self.authorizer = Authorizer(self.acls, self.settings)
            logger.info(
                "authorization enabled",
                authorizer=self.settings.authorizer,
                acls=count,
                super_users=sorted(self.settings.super_users),
                allow_everyone_if_no_acl_found=self.settings.allow_everyone_if_no_acl_found,
            )

    @property
    def listeners(self) -> tuple[Listener, ...]:
        listeners: tuple[Listener, ...] = self.ctx.config.listeners
        return listeners

    # -- connections ------------------------------------------------------------------------

    async def open(
        self, stream: PlainSocketStream, listener: Listener, peer: str, host: str
    ) -> tuple[trio.abc.Stream, Session]:
        """The stream to serve (TLS-wrapped on a TLS listener) and the connection's session.
        Raises CloseConnectionError (logged) when the TLS handshake fails or the client
        certificate maps to no principal."""
        session = Session(gate=self, listener=listener, peer=peer, host=host)
        if listener.uses_sasl:
            session.sasl = SaslState(
                listener.sasl_mechanisms,
                listener.plain_users,
                self.credentials.lookup,
                self.decoy_key,
                self._token_credential,
            )
        if not listener.uses_tls:
            return stream, session
        tls = trio.SSLStream(
            stream, self._tls[listener.name], server_side=True, https_compatible=True
        )
        reason = None
        with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT_S) as scope:
            try:
                await tls.do_handshake()
            except trio.BrokenResourceError as exc:
                cause = exc.__cause__
                reason = (
                    f"{cause.reason or cause}" if isinstance(cause, ssl.SSLError) else repr(exc)
                )
        if scope.cancelled_caught:
            reason = f"no TLS handshake within {TLS_HANDSHAKE_TIMEOUT_S:g} s"
        if reason is None and not listener.uses_sasl:
            cert = tls.getpeercert()
            if cert:
                dn = distinguished_name(cert)
                try:
                    session.principal = "User:" + self._mappers[listener.name].name(dn)
                except NoMatchingRuleError as exc:
                    reason = str(exc)
        if reason == "UNEXPECTED_EOF_WHILE_READING":  # a port probe, or a client gone
            raise CloseConnectionError("closed by client during the TLS handshake")
        if reason is not None:
            logger.warning(
                "TLS connection refused",
                peer=peer,
                listener=listener.name,
                reason=reason,
                action="check the client trusts the broker's CA and, with ssl.client.auth, "
                "that its certificate is signed by a CA in ssl.truststore.location",
            )
            raise CloseConnectionError(f"TLS handshake failed: {reason}")
        return tls, session

    def admit(self, session: Session, request: Request) -> None:
        """Raises CloseConnectionError (logged) for a request the session may not make yet."""
        if session.authenticated or request.header.api_key in BEFORE_AUTHENTICATION:
            return
        api = request.header.api_key.name
        logger.warning(
            "request before SASL authentication; closing the connection",
            peer=session.peer,
            listener=session.listener.name,
            api=api,
            action="configure the client with security.protocol="
            f"{session.listener.protocol} and its sasl.mechanism and credentials",
        )
        raise CloseConnectionError(f"{api} request before SASL authentication")

    # -- SASL --------------------------------------------------------------------------------
    def _token_credential(
        self, token_id: str, mechanism: Mechanism
    ) -> tuple[Credential, str] | None:
        found = self.tokens.scram(token_id, mechanism)
        if found is None:
            return None
        credential, token = found
        return credential, token.owner.partition(":")[2]

    async def maintain_tokens(self) -> None:
        """Follow the token changes other brokers make, derive the tokens' SCRAM credentials,
        then every delegation.token.expiry.check.interval.ms remove the expired tokens (runs
        for the broker's life; nothing without a secret key). In a cluster every broker
        sweeps: a removal is conditional on the token still being expired, so two brokers
        sweeping at once remove it once."""
        if not self.tokens.enabled:
            return
        interval_s = self.ctx.config.delegation_token_expiry_check_interval_ms / 1000
        async with trio.open_nursery() as nursery:
            self.tokens.follow(nursery)
            while True:
                try:
                    self.tokens.forget_removed()
                    await self.tokens.prepare()
                    gone = await self.tokens.remove_expired()
                except (TokenStoreError, StateFileError) as exc:
                    logger.error(
                        "delegation tokens could not be read or written; retrying at the next "
                        "expiry check",
                        error=str(exc),
                    )
                    gone = []
                for token in gone:
                    logger.info(
                        "delegation token expired", token_id=token.token_id, owner=token.owner
                    )
                await trio.sleep(interval_s)

    def authenticated(self, session: Session) -> None:
        """Record a completed authentication: the session's principal, a log line, metrics."""
        assert session.sasl is not None
        owner = session.sasl.token_owner
        session.principal = f"User:{owner if owner is not None else session.sasl.username}"
        session.token_authenticated = owner is not None
        logger.info(
            "authenticated",
            peer=session.peer,
            listener=session.listener.name,
            mechanism=session.sasl.mechanism,
            principal=session.principal,
            # the token's id, not its HMAC (the password)
            delegation_token=session.sasl.username if session.token_authenticated else None,
        )
        self._count(session, ok=True)

    async def failed(self, session: Session, reason: str) -> None:
        """A failed authentication: logged (peer, mechanism, user; never the password),
        counted, delayed by connection.failed.authentication.delay.ms; the connection is closed
        after the answer."""
        sasl = session.sasl
        logger.warning(
            "authentication failed",
            peer=session.peer,
            listener=session.listener.name,
            mechanism=sasl.mechanism if sasl else None,
            user=sasl.username if sasl else None,
            reason=reason,
            action="check the client's user name and password (SCRAM users: chronolog users list)",
        )
        self._count(session, ok=False)
        session.close_reason = f"authentication failed: {reason}"
        await trio.sleep(self.settings.failed_authentication_delay_ms / 1000)

    def _count(self, session: Session, ok: bool) -> None:
        metrics = self.ctx.metrics
        if metrics is not None:
            metrics.authentication(session.listener.name, ok)

    async def raw_token(self, session: Session, payload: bytes) -> bytes:
        """The raw frame answering a raw SASL token (after a SaslHandshake v0). Raises
        CloseConnectionError when the authentication fails (Kafka closes without an
        answer)."""
        sasl = session.sasl
        assert sasl is not None
        try:
            answer = sasl.authenticate(payload)
        except (SaslFailure, IllegalSaslState) as exc:
            await self.failed(session, str(exc))
            raise CloseConnectionError(session.close_reason) from None
        if sasl.complete:
            self.authenticated(session)
        return answer

    # -- requests ----------------------------------------------------------------------------

    async def call(self, session: Session, handler: Handler, request: Request) -> Any:
        """Run ``handler`` for ``request`` within the session's permissions, answering with
        the addresses of the session's listener."""
        if self.authorizer is not None:
            body = await rules.call(self.authorizer, session, handler, self.ctx, request)
        else:
            body = await handler(self.ctx, request)
        listener = session.listener
        if body is not None and listener is not self.ctx.config.listeners[0]:  # no property call
            _advertise(request.header.api_key, body, lambda node: self._address(node, listener))
        return body

    def _address(self, broker_id: int, listener: Listener) -> tuple[str, int] | None:
        """Where ``listener``'s clients reach broker ``broker_id``: this broker's own address on
        it, another's as the cluster knows it (in Kafka every broker has the same listeners)."""
        if broker_id == self.ctx.config.broker_id:
            return listener.advertised_host, listener.advertised_port
        address: tuple[str, int] | None = self.ctx.replication.broker_address(
            broker_id, listener.name
        )
        return address


def _advertise(api: ApiKey, body: Any, address_of: Callable[[int], tuple[str, int] | None]) -> None:
    """Point the answer's broker entries at ``address_of(node id)`` (where it is known)."""

    def point(entry: Any, node_id: Any) -> None:
        found = address_of(node_id) if isinstance(node_id, int) else None
        if found is not None:
            entry["host"], entry["port"] = found

    if api in (ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER):
        for broker in body.get("brokers", ()):
            point(broker, broker.get("node_id", broker.get("broker_id")))
    elif api == ApiKey.FIND_COORDINATOR:
        for entry in [body, *body.get("coordinators", ())]:
            if "host" in entry:
                point(entry, entry.get("node_id"))
