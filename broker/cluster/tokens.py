"""Delegation tokens in a cluster, kept in ZooKeeper as Kafka's ZooKeeper mode kept them
(kafka.server.DelegationTokenManagerZk and ZkData.scala, Kafka 1.1-3.9), so a token made
through one broker authenticates, renews and expires through every broker. Every broker has the
same ``delegation.token.secret.key``: the HMAC is never stored, each broker computes it.

Layout:

- ``/delegation_token/tokens/<tokenId>``: ``{"version":3,"owner":"User%3Aalice",
  "tokenRequester":"User%3Aalice","renewers":["User%3Abob"],"issueTimestamp":..,
  "maxTimestamp":..,"expiryTimestamp":..,"tokenId":".."}``, principals URL-encoded as Kafka's
  Sanitizer writes them (versions 1 and 2, without ``tokenRequester``, are read with the owner
  as requester).
- ``/delegation_token/token_changes/token_change_<seq>`` (persistent sequential): the id of a
  token created, changed or removed.

Any broker serves the four token apis (as in Kafka's ZooKeeper mode). A change reads the token's
node, applies the api's rules to what ZooKeeper holds and writes conditionally on the version
read (created when absent, deleted when removed); when another broker wrote first it reads
again and retries, ten times at most, so two brokers renewing one token at once lose neither
renewal (Kafka wrote unconditionally under a lock of its own broker). Then it announces the id
with a change node. Every broker loads every token before it serves and follows the change
nodes: it reads each named token again (ZooKeeper's latest wins, whatever the notifications'
order), derives a new token's SCRAM credentials in a worker thread before the token shows, and
deletes notifications older than 15 minutes. Changes and notification reads hold one lock, so
a change this broker makes is never undone by an older read.

Expired tokens are removed by every broker's own sweep (``delegation.token.expiry.check.
interval.ms``), not by the controller alone as in Kafka: the removal is conditional on the
token read being expired at that version, so sweeps racing each other remove it once and never
remove a token renewed meanwhile; every broker refuses an expired token at authentication
whether or not it is removed yet.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_plus

import structlog
import trio
from kazoo.exceptions import BadVersionError, KazooException, NoNodeError, NodeExistsError

from broker.cluster.zk import WatchFollower, ZkDataError, ZooKeeper, notification_sequence
from broker.errors import ClusterStateError
from broker.security.tokens import Change, Prepare, TokenInfo, TokenStore, TokenStoreError

logger = structlog.get_logger(__name__)

TOKENS = "/delegation_token/tokens"
CHANGES = "/delegation_token/token_changes"
CHANGE_PREFIX = "token_change_"
VERSION = 3  # DelegationTokenManagerZk.CurrentVersion
MAX_UPDATE_RETRIES = 10
RETRY_BACKOFF_S = 0.1
_UNRESERVED = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: Java's URLEncoder (UTF-8; letters, digits and ``.-_*``
    kept), then ``*`` as %2A and space as %20."""
    return "".join(chr(byte) if byte in _UNRESERVED else f"%{byte:02X}" for byte in name.encode())


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder: ``+`` is a space)."""
    return unquote_plus(name, errors="strict")


def token_path(token_id: str) -> str:
    return f"{TOKENS}/{token_id}"


def token_json(token: TokenInfo) -> bytes:
    """A token's node as DelegationTokenInfoZNode.encode writes it."""
    doc = {
        "version": VERSION,
        "owner": sanitize(token.owner),
        "tokenRequester": sanitize(token.requester),
        "renewers": [sanitize(r) for r in token.renewers],
        "issueTimestamp": token.issue_ms,
        "maxTimestamp": token.max_ms,
        "expiryTimestamp": token.expiry_ms,
        "tokenId": token.token_id,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def parse_token(path: str, data: bytes) -> TokenInfo:
    """A token node (DelegationTokenManagerZk.fromBytes); ZkDataError when it is not one."""
    try:
        doc: Any = json.loads(data)
        version = int(doc["version"])
        if not 0 < version <= VERSION:
            raise ValueError(f"version {version} is not 1 to {VERSION}")
        owner = _principal(doc["owner"])
        return TokenInfo(
            str(doc["tokenId"]),
            owner,
            _principal(doc["tokenRequester"]) if version >= 3 else owner,
            tuple(_principal(r) for r in doc["renewers"]),
            int(doc["issueTimestamp"]),
            int(doc["expiryTimestamp"]),
            int(doc["maxTimestamp"]),
        )
    except (ValueError, KeyError, TypeError, UnicodeError) as exc:
        raise ZkDataError(f"{path} is not a delegation token ({exc!r}): {data[:200]!r}") from None


def _principal(text: Any) -> str:
    principal = desanitize(str(text))
    if ":" not in principal:
        raise ValueError(f"{principal!r} is not a principal (Type:name)")
    return principal


class ZkTokenStore(TokenStore):
    """A cluster's delegation tokens (see the module docstring). :meth:`load` before the broker
    serves; the SecurityGate's token maintenance calls :meth:`follow`. Trio thread only."""

    def __init__(self, zk: ZooKeeper) -> None:
        self._zk = zk
        self._tokens: dict[str, TokenInfo] = {}
        self._lock = trio.Lock()
        self._follower = WatchFollower(self._handle_new, "delegation token changes")
        self._last_handled = -1
        self._prepare: Prepare | None = None

    def tokens(self) -> dict[str, TokenInfo]:
        return self._tokens

    async def load(self) -> None:
        """Read every token (at start-up, before serving). Raises ClusterStateError."""
        try:
            async with self._lock:
                for path in (CHANGES, TOKENS):  # KafkaZkClient.createDelegationTokenPaths
                    await self._zk.call(self._zk.client.ensure_path, self._zk.path(path))
                for token_id in await self._zk.children(TOKENS):
                    token = (await self._read(token_id))[0]
                    if token is not None:
                        self._tokens[token_id] = token
        except KazooException as exc:
            raise ClusterStateError(
                f"reading the delegation tokens in ZooKeeper failed ({exc!r})"
            ) from exc
        logger.info("delegation tokens loaded", tokens=len(self._tokens), source="ZooKeeper")

    async def _read(self, token_id: str) -> tuple[TokenInfo | None, int]:
        """The token and its node's version (-1: no node). An unreadable node is logged and
        holds no token (an expire through any broker cannot reach it: delete the node)."""
        path = token_path(token_id)
        found = await self._zk.get_or_none(path)
        if found is None:
            return None, -1
        data, stat = found
        try:
            token = parse_token(path, data)
        except ZkDataError as exc:
            logger.error(
                "ignoring an unreadable delegation token node",
                error=str(exc),
                action=f"delete {path} in ZooKeeper and create the token again",
            )
            return None, stat.version
        if token.token_id != token_id:
            logger.error(
                "ignoring a delegation token node naming another token",
                path=path,
                token_id=token.token_id,
                action=f"delete {path} in ZooKeeper and create the token again",
            )
            return None, stat.version
        return token, stat.version

    def _adopt(self, token_id: str, token: TokenInfo | None) -> None:
        if token is None:
            self._tokens.pop(token_id, None)
        else:
            self._tokens[token_id] = token

    async def update(self, token_id: str, change: Change) -> TokenInfo | None:
        path = token_path(token_id)
        try:
            async with self._lock:
                for _ in range(MAX_UPDATE_RETRIES + 1):
                    current, version = await self._read(token_id)
                    new = change(current)
                    if new == current:
                        self._adopt(token_id, current)
                        return new
                    try:
                        if new is None:  # (ZooKeeper.delete takes "no node" for done)
                            await self._zk.call(
                                self._zk.client.delete, self._zk.path(path), version=version
                            )
                        elif version < 0:
                            await self._zk.create(path, token_json(new))
                        else:
                            await self._zk.set(path, token_json(new), version=version)
                    except (BadVersionError, NodeExistsError, NoNodeError):
                        await trio.sleep(RETRY_BACKOFF_S)  # another broker changed it: read again
                        continue
                    self._adopt(token_id, new)
                    await self._zk.create(
                        f"{CHANGES}/{CHANGE_PREFIX}", token_id.encode(), sequence=True
                    )
                    return new
        except KazooException as exc:
            raise TokenStoreError(
                f"changing the delegation token at {path} in ZooKeeper failed ({exc!r}); check "
                "ZooKeeper is reachable, then retry"
            ) from exc
        raise TokenStoreError(
            f"the delegation token at {path} changed under this broker {MAX_UPDATE_RETRIES} "
            "times in a row; retry"
        )

    # -- following the other brokers' changes ------------------------------------------------
    def follow(self, nursery: trio.Nursery, prepare: Prepare) -> None:
        self._prepare = prepare
        self._follower.start(nursery)

    def wake(self) -> None:
        """Look at the change path again (a watch fired, or a new ZooKeeper session)."""
        self._follower.wake()

    async def _handle_new(self) -> None:
        nodes = await self._zk.children(CHANGES, watch=self.wake)
        newest = self._last_handled
        named: list[str] = []
        for node in nodes:
            sequence = notification_sequence(node, CHANGE_PREFIX)
            if sequence is None or sequence <= self._last_handled:
                continue
            newest = max(newest, sequence)
            found = await self._zk.get_or_none(f"{CHANGES}/{node}")
            if found is None:
                continue  # expired and deleted meanwhile
            try:
                token_id = found[0].decode()
            except UnicodeDecodeError:
                logger.warning("ignoring a delegation token change naming no token", node=node)
                continue
            if token_id not in named:
                named.append(token_id)
        async with self._lock:
            read = {token_id: (await self._read(token_id))[0] for token_id in named}
            new = [i for i, token in read.items() if token is not None and i not in self._tokens]
            if new and self._prepare is not None:
                await self._prepare(new)  # credentials first: a token that shows authenticates
            for token_id, token in read.items():
                if token != self._tokens.get(token_id):
                    logger.info(
                        "delegation token changed in the cluster",
                        token_id=token_id,
                        removed=token is None,
                        expiry_ms=None if token is None else token.expiry_ms,
                    )
                self._adopt(token_id, token)
        self._last_handled = newest
        await self._zk.purge_notifications(CHANGES, nodes)


__all__ = ["ZkTokenStore", "token_json", "parse_token", "sanitize", "desanitize"]
