"""Delegation tokens (KIP-48, KIP-373), with Kafka 4.1's rules (DelegationTokenControlManager,
KafkaApis' token handlers, ScramSaslServer's tokenauth).

A principal authenticated with SASL (not over a plaintext listener, not itself with a token)
creates a token for itself, or, with CREATE_TOKENS on the other user, for an owner it names.
The token is a random id and its HMAC-SHA512 under ``delegation.token.secret.key``; a client
then authenticates with SCRAM-SHA-256/512 using the id as the user name, the base64 of the HMAC
as the password and the extension ``tokenauth=true``, as the token's owner. A token lives until
its expiry (``delegation.token.expiry.time.ms`` after its creation or last renewal, never past
its maximum, ``delegation.token.max.lifetime.ms`` after creation); its owner and renewers renew
or expire it. Without a secret key every token api answers DELEGATION_TOKEN_AUTH_DISABLED.

Where the tokens live is a :class:`TokenStore`: id, owner, requester, renewers and the three
timestamps, never the HMAC, which the secret key gives again. A single broker keeps them in
``chronolog-delegation-tokens.json`` in the first log dir (:class:`TokenFile`: mode 0600, written
whole with fsync, see :mod:`.files`); a cluster keeps them in ZooKeeper under
``/delegation_token`` as Kafka's ZooKeeper mode did (broker/cluster/tokens.py), with the same
secret key configured on every broker, so a token made through one broker authenticates on all.
A token's SCRAM credentials (PBKDF2 of the HMAC, 4096 iterations, as Kafka's
DelegationTokenCache prepares them) are derived in a worker thread by
:meth:`DelegationTokens.prepare`, so no authentication derives a key on the event loop. Expired
tokens are removed every ``delegation.token.expiry.check.interval.ms`` and refused at
authentication before then.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Callable

import trio

from broker import workers
from broker.security.files import StateFileError, WatchedFile
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


class TokenStoreError(Exception):
    """A token store could not be read or written; the message says where and what to check."""


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


Change = Callable[[TokenInfo | None], TokenInfo | None]
Prepare = Callable[[list[str]], Awaitable[None]]


class TokenStore(ABC):
    """Where a broker's tokens live. :meth:`tokens` reads memory (trio thread); :meth:`update`
    writes through to the store."""

    @abstractmethod
    def tokens(self) -> Mapping[str, TokenInfo]:
        """Every token, by id."""

    @abstractmethod
    async def update(self, token_id: str, change: Change) -> TokenInfo | None:
        """Store ``change(token)`` (the token stored under ``token_id``, None when there is
        none) in its place, None removing it, atomically against every other writer; returns
        what was stored. ``change`` runs again when another writer came first, and may raise
        TokenError (nothing is written). Raises TokenStoreError."""

    def follow(self, nursery: trio.Nursery, prepare: Prepare) -> None:
        """Keep :meth:`tokens` up to date with the changes other brokers make, awaiting
        ``prepare(ids)`` before tokens new here show. Nothing for a store only this broker
        writes."""


class TokenFile(TokenStore):
    """A single broker's tokens, in ``chronolog-delegation-tokens.json`` in ``log_dir``."""

    def __init__(self, log_dir: str) -> None:
        self._file = WatchedFile(os.path.join(log_dir, FILE_NAME), _parse)

    def tokens(self) -> Mapping[str, TokenInfo]:
        tokens: dict[str, TokenInfo] = self._file.current()
        return tokens

    async def update(self, token_id: str, change: Change) -> TokenInfo | None:
        def write(doc: Any) -> tuple[Any, TokenInfo | None]:
            tokens = _parse(doc)
            current = tokens.get(token_id)
            new = change(current)
            if new == current:
                return None, new
            if new is None:
                del tokens[token_id]
            else:
                tokens[token_id] = new
            return _doc(tokens), new

        try:
            stored: TokenInfo | None = await workers.run_sync(self._file.update, write)
        except (OSError, StateFileError) as exc:
            raise TokenStoreError(
                f"{self._file.path} could not be written ({exc}); check the first log dir's disk"
            ) from exc
        return stored


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
    """The broker's tokens and their rules over a :class:`TokenStore`. ``create``, ``renew``,
    ``expire`` and ``remove_expired`` write the store (raising TokenStoreError when they
    cannot); ``describe``, ``scram`` and ``enabled`` read memory only; ``prepare`` derives keys
    in a worker thread. Trio thread only."""

    def __init__(
        self,
        store: TokenStore,
        secret_key: str | None,
        max_lifetime_ms: int,
        expiry_time_ms: int,
        clock: Callable[[], int],
    ) -> None:
        self._store = store
        self._secret = secret_key
        self._max_lifetime_ms = max_lifetime_ms
        self._expiry_time_ms = expiry_time_ms
        self._clock = clock
        # token id -> mechanism name -> credential, made by prepare()
        self._credentials: dict[str, dict[str, Credential]] = {}

    @property
    def enabled(self) -> bool:
        return self._secret is not None

    def tokens(self) -> Mapping[str, TokenInfo]:
        return self._store.tokens()

    def _secret_key(self) -> str:
        if self._secret is None:
            raise TokenError(ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED)
        return self._secret

    def hmac_of(self, token: TokenInfo) -> bytes:
        return token_hmac(self._secret_key(), token.token_id)

    def _by_hmac(self, mac: bytes) -> TokenInfo:
        key = self._secret_key()
        for token in self.tokens().values():
            if hmac.compare_digest(token_hmac(key, token.token_id), mac):
                return token
        raise TokenError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)

    # -- the apis ------------------------------------------------------------------------------
    async def create(
        self, owner: str, requester: str, renewers: list[str], max_lifetime_ms: int
    ) -> tuple[TokenInfo, bytes]:
        """A new token and its HMAC, its credentials ready. Raises TokenError (disabled;
        INVALID_PRINCIPAL_TYPE for a renewer that is not a User)."""
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
        await self._store.update(token.token_id, lambda current: token)
        await self.prepare([token.token_id])
        return token, token_hmac(key, token.token_id)

    async def renew(self, mac: bytes, principal: str, period_ms: int) -> int:
        """The new expiry of the token ``mac`` names. Raises TokenError: NOT_FOUND, EXPIRED,
        OWNER_MISMATCH (neither its owner nor a renewer)."""
        token_id = self._by_hmac(mac).token_id
        now = self._clock()

        def change(token: TokenInfo | None) -> TokenInfo:
            if token is None:
                raise TokenError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
            if token.expired(now):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
            if not token.owner_or_renewer(principal):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
            renew = self._expiry_time_ms
            if period_ms > 0:
                renew = min(renew, period_ms)
            return _with_expiry(token, min(token.max_ms, now + renew))

        renewed = await self._store.update(token_id, change)
        assert renewed is not None
        return renewed.expiry_ms

    async def expire(self, mac: bytes, principal: str, period_ms: int) -> int:
        """Expire the token ``mac`` names now (a negative period: it is removed) or after
        ``period_ms``; the new expiry. Raises TokenError as :meth:`renew`."""
        token_id = self._by_hmac(mac).token_id
        now = self._clock()

        def change(token: TokenInfo | None) -> TokenInfo | None:
            if token is None:
                raise TokenError(ErrorCode.DELEGATION_TOKEN_NOT_FOUND)
            if not token.owner_or_renewer(principal):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH)
            if period_ms < 0:
                return None
            if token.expired(now):
                raise TokenError(ErrorCode.DELEGATION_TOKEN_EXPIRED)
            return _with_expiry(token, min(token.max_ms, now + period_ms))

        expired = await self._store.update(token_id, change)
        return now if expired is None else expired.expiry_ms

    async def remove_expired(self) -> list[TokenInfo]:
        """Delete the tokens past their expiry or maximum (Kafka's expireTokens); those this
        call removed (in a cluster every broker sweeps, and a token another broker removed
        first is not counted again)."""
        now = self._clock()
        gone: list[TokenInfo] = []
        for token in [t for t in self.tokens().values() if t.expired(now)]:
            removed: list[TokenInfo] = []

            def change(current: TokenInfo | None) -> TokenInfo | None:
                removed.clear()
                if current is None or not current.expired(now):
                    return current  # gone already, or renewed meanwhile
                removed.append(current)
                return None

            await self._store.update(token.token_id, change)
            gone += removed
        return gone

    # -- reads ---------------------------------------------------------------------------------
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

    # -- credentials ---------------------------------------------------------------------------
    async def prepare(self, token_ids: Iterable[str] | None = None) -> None:
        """Derive, in a worker thread, the SCRAM credentials of ``token_ids`` (None: every
        stored token) that have none yet."""
        if self._secret is None:
            return
        wanted = [
            t for t in (self.tokens() if token_ids is None else token_ids)
            if t not in self._credentials
        ]  # fmt: skip
        if wanted:
            self._credentials.update(await workers.run_sync(_derive, self._secret, wanted))

    def forget_removed(self) -> None:
        """Drop the credentials of tokens no longer stored."""
        live = self.tokens()
        for token_id in [t for t in self._credentials if t not in live]:
            del self._credentials[token_id]

    def follow(self, nursery: trio.Nursery) -> None:
        """Follow the store's changes made by other brokers (see TokenStore.follow)."""
        self._store.follow(nursery, self.prepare)


def _derive(secret: str, token_ids: list[str]) -> dict[str, dict[str, Credential]]:
    made = {}
    for token_id in token_ids:
        password = base64.b64encode(token_hmac(secret, token_id)).decode()
        made[token_id] = {
            m.name: Credential.from_password(m, password, MIN_ITERATIONS)
            for m in MECHANISMS.values()
        }
    return made


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


__all__ = [
    "Change",
    "DelegationTokens",
    "Prepare",
    "TokenError",
    "TokenFile",
    "TokenInfo",
    "TokenStore",
    "TokenStoreError",
    "token_hmac",
    "FILE_NAME",
]
