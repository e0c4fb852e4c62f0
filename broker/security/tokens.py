"""Delegation tokens (KIP-48, KIP-373) on a single broker, with Kafka 4.1's rules
(DelegationTokenControlManager, KafkaApis' token handlers, ScramSaslServer's tokenauth).

A principal authenticated with SASL (not over a plaintext listener, not itself with a token)
creates a token for itself, or, with CREATE_TOKENS on the other user, for an owner it names.
The token is a random id and its HMAC-SHA512 under ``delegation.token.secret.key``; a client
then authenticates with SCRAM-SHA-256/512 using the id as the user name, the base64 of the HMAC
as the password and the extension ``tokenauth=true``, as the token's owner. A token lives until
its expiry (``delegation.token.expiry.time.ms`` after its creation or last renewal, never past
its maximum, ``delegation.token.max.lifetime.ms`` after creation); its owner and renewers renew
or expire it. Without a secret key every token api answers DELEGATION_TOKEN_AUTH_DISABLED.

The tokens live in ``chronolog-delegation-tokens.json`` in the first log dir (mode 0600, written
whole with fsync, see :mod:`.files`): id, owner, requester, renewers and the three timestamps;
never the HMAC, which the secret key gives again. A token's SCRAM credentials (PBKDF2 of the
HMAC, 4096 iterations, as Kafka's DelegationTokenCache prepares them) are made by
:meth:`DelegationTokens.prepare` in a worker thread, so no authentication derives a key on the
event loop. Expired tokens are removed every ``delegation.token.expiry.check.interval.ms`` and
refused at authentication before then.

Departure: a cluster does not serve the token apis (Kafka's ZooKeeper mode kept tokens under
/delegation_token); on one broker they are served as Kafka serves them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from broker.security.files import WatchedFile
from broker.security.scram import MECHANISMS, MIN_ITERATIONS, Credential, Mechanism
from protocol.errors import ErrorCode

FILE_NAME = "chronolog-delegation-tokens.json"
USER_TYPE = "User"


class TokenError(Exception):
    """Raised by :class:`DelegationTokens` when a token request is refused; ``code`` is the
    answer's error."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


@dataclass(frozen=True)
class TokenInfo:
    """One token (Kafka's TokenInformation); principals as "User:name"."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    expiry_ms: int
    max_ms: int

    def owner_or_renewer(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers

    def expired(self, now_ms: int) -> bool:
        return self.max_ms < now_ms or self.expiry_ms < now_ms


def token_hmac(secret_key: str, token_id: str) -> bytes:
    """Kafka's createHmac: HMAC-SHA512 of the id under the secret key (both UTF-8)."""
    return hmac.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


def _parse(doc: Any) -> dict[str, TokenInfo]:
    return {
        token_id: TokenInfo(
            token_id,
            t["owner"],
            t["requester"],
            tuple(t["renewers"]),
            int(t["issue_ms"]),
            int(t["expiry_ms"]),
            int(t["max_ms"]),
        )
        for token_id, t in (doc or {}).get("tokens", {}).items()
    }


def _doc(tokens: dict[str, TokenInfo]) -> dict[str, Any]:
    return {
        "version": 1,
        "tokens": {
            t.token_id: {
                "owner": t.owner,
                "requester": t.requester,
                "renewers": list(t.renewers),
                "issue_ms": t.issue_ms,
                "expiry_ms": t.expiry_ms,
                "max_ms": t.max_ms,
            }
            for t in sorted(tokens.values(), key=lambda t: t.token_id)
        },
    }


class DelegationTokens:
    """The broker's tokens. ``create``, ``renew``, ``expire`` and ``remove_expired`` write the
    file: call them in a worker thread. ``describe``, ``scram`` and ``enabled`` read memory
    only (one stat of the file); ``prepare`` derives keys (a worker thread)."""

    def __init__(
        self,
        log_dir: str,
        secret_key: str | None,
        max_lifetime_ms: int,
        expiry_time_ms: int,
        clock: Callable[[], int],
    ) -> None:
        self._file = WatchedFile(os.path.join(log_dir, FILE_NAME), _parse)
        self._secret = secret_key
        self._max_lifetime_ms = max_lifetime_ms
        self._expiry_time_ms = expiry_time_ms
        self._clock = clock
        # token id -> mechanism name -> credential, made by prepare()
        self._credentials: dict[str, dict[str, Credential]] = {}

    @property
    def enabled(self) -> bool:
        return self._secret is not None

    def tokens(self) -> dict[str, TokenInfo]:
        tokens: dict[str, TokenInfo] = self._file.current()
        return tokens

    def _secret_key(self) -> str:
        if self._secret is None:
            raise TokenError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        return self._secret

    def hmac_of(self, token: TokenInfo) -> bytes:
        return token_hmac(self._secret_key(), token.token_id)

    def _by_hmac(self, tokens: dict[str, TokenInfo], mac: bytes) -> TokenInfo:
        key = self._secret_key()
        for token in tokens.values():
            if hmac.compare_digest(token_hmac(key, token.token_id), mac):
                return token
        raise TokenError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)

    # -- the apis (worker thread) --------------------------------------------------------------
    def create(
        self, owner: str, requester: str, renewers: list[str], max_lifetime_ms: int
    ) -> tuple[TokenInfo, bytes]:
        """A new token and its HMAC. Raises TokenError (disabled; INVALID_PRINCIPAL_TYPE for a
        renewer that is not a User)."""
        key = self._secret_key()
        if any(r.partition(":")[0] != USER_TYPE for r in renewers):
            raise TokenError(ErrorCode.INVALID_PRINCIPAL_TYPE)
        now = self._clock()
        lifetime = self._max_lifetime_ms
        if max_lifetime_ms > 0:
            lifetime = min(lifetime, max_lifetime_ms)
        max_ms = now + lifetime
        token = TokenInfo(
            _kafka_uuid(),
            owner,
            requester,
            tuple(renewers),
            now,
            min(max_ms, now + self._expiry_time_ms),
            max_ms,
        )

        def add(doc: Any) -> tuple[Any, None]:
            tokens = _parse(doc)
            tokens[token.token_id] = token
            return _doc(tokens), None

        self._file.update(add)
        self.prepare()
        return token, token_hmac(key, token.token_id)

    def renew(self, mac: bytes, principal: str, period_ms: int) -> int:
        """The new expiry of the token ``mac`` names. Raises TokenError: NOT_FOUND, EXPIRED,
        OWNER_MISMATCH (neither its owner nor a renewer)."""
        now = self._clock()

        def change(doc: Any) -> tuple[Any, int]:
            tokens = _parse(doc)
            token = self._by_hmac(tokens, mac)
            if token.expired(now):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
            if not token.owner_or_renewer(principal):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
            renew = self._expiry_time_ms
            if period_ms > 0:
                renew = min(renew, period_ms)
            expiry = min(token.max_ms, now + renew)
            tokens[token.token_id] = _with_expiry(token, expiry)
            return _doc(tokens), expiry

        expiry: int = self._file.update(change)
        return expiry

    def expire(self, mac: bytes, principal: str, period_ms: int) -> int:
        """Expire the token ``mac`` names now (a negative period: it is removed) or after
        ``period_ms``; the new expiry. Raises TokenError as :meth:`renew`."""
        now = self._clock()

        def change(doc: Any) -> tuple[Any, int]:
            tokens = _parse(doc)
            token = self._by_hmac(tokens, mac)
            if not token.owner_or_renewer(principal):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
            if period_ms < 0:
                del tokens[token.token_id]
                return _doc(tokens), now
            if token.expired(now):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
            expiry = min(token.max_ms, now + period_ms)
            tokens[token.token_id] = _with_expiry(token, expiry)
            return _doc(tokens), expiry

        expiry: int = self._file.update(change)
        self._forget_removed()
        return expiry

    def remove_expired(self) -> list[TokenInfo]:
        """Delete the tokens past their expiry or maximum (Kafka's expireTokens); those removed."""
        now = self._clock()

        def change(doc: Any) -> tuple[Any, list[TokenInfo]]:
            tokens = _parse(doc)
            gone = [t for t in tokens.values() if t.expired(now)]
            if not gone:
                return None, []
            return _doc({i: t for i, t in tokens.items() if not t.expired(now)}), gone

        gone: list[TokenInfo] = self._file.update(change)
        self._forget_removed()
        return gone

    # -- reads (trio thread) -------------------------------------------------------------------
    def describe(self, owners: list[str] | None) -> list[TokenInfo]:
        """The tokens owned or renewable by one of ``owners`` (None: every token), by id."""
        found = sorted(self.tokens().values(), key=lambda t: t.token_id)
        if owners is None:
            return found
        return [t for t in found if any(t.owner_or_renewer(o) for o in owners)]

    def scram(self, token_id: str, mechanism: Mechanism) -> tuple[Credential, TokenInfo] | None:
        """A token's credential for ``mechanism`` and the token, for tokenauth; None for a token
        unknown, not prepared yet, or expired."""
        token = self.tokens().get(token_id)
        credential = self._credentials.get(token_id, {}).get(mechanism.name)
        if token is None or credential is None or token.expired(self._clock()):
            return None
        return credential, token

    def prepare(self) -> None:
        """Derive the SCRAM credentials of every token that has none yet (worker thread)."""
        if self._secret is None:
            return
        for token_id in list(self.tokens()):
            if token_id in self._credentials:
                continue
            password = base64.b64encode(token_hmac(self._secret, token_id)).decode()
            self._credentials[token_id] = {
                m.name: Credential.from_password(m, password, MIN_ITERATIONS)
                for m in MECHANISMS.values()
            }
        self._forget_removed()

    def _forget_removed(self) -> None:
        live = self.tokens()
        for token_id in [t for t in self._credentials if t not in live]:
            del self._credentials[token_id]


def _kafka_uuid() -> str:
    """A token id as Kafka's Uuid.randomUuid().toString() writes one (URL-safe base64 of 16
    random bytes, no padding, never starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _with_expiry(token: TokenInfo, expiry_ms: int) -> TokenInfo:
    return TokenInfo(
        token.token_id,
        token.owner,
        token.requester,
        token.renewers,
        token.issue_ms,
        expiry_ms,
        token.max_ms,
    )


__all__ = ["DelegationTokens", "TokenError", "TokenInfo", "token_hmac", "FILE_NAME"]
