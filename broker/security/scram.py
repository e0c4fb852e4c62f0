"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677, Kafka's KIP-84), sans-IO.

A credential is what the broker keeps of a password: a salt, an iteration count and the
StoredKey/ServerKey derived from ``SaltedPassword = Hi(password, salt, i)`` (PBKDF2-HMAC).
Neither the password nor the salted password is kept, so a stolen credential file does not
log anyone in. :class:`ScramServer` runs the server's side of one exchange:

    client-first  n,,n=user,r=cnonce          -> server-first  r=cnonce+snonce,s=salt,i=4096
    client-final  c=biws,r=cnonce+snonce,p=.. -> server-final  v=ServerSignature

Any deviation (another nonce than the one just issued, a replayed exchange, a wrong proof, an
unknown user, a malformed or truncated message) raises :class:`ScramError`. An unknown user gets
a made-up salt and fails at the proof, like a wrong password, so the exchange does not tell
which users exist (Kafka fails at the first message there: a deliberate departure).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass, field
from typing import Callable

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
"""Kafka's ScramMechanism bounds on the iteration count."""


@dataclass(frozen=True)
class Mechanism:
    """A SCRAM mechanism: its name, hash and Kafka's type id (DescribeUserScramCredentials)."""

    name: str
    hash_name: str
    type_id: int

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode("utf-8"), salt, iterations)


SHA256 = Mechanism("SCRAM-SHA-256", "sha256", 1)
SHA512 = Mechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SHA256, SHA512)}
BY_TYPE = {m.type_id: m for m in (SHA256, SHA512)}


class ScramError(Exception):
    """Raised when a SCRAM exchange fails; the message says why in words safe to log and to
    send to the client (never a password, key or proof)."""


@dataclass(frozen=True)
class Credential:
    """One user's credential for one mechanism (the keys are secrets: no repr)."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: Mechanism, salted: bytes, salt: bytes, iterations: int
    ) -> Credential:
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(
            salt=salt,
            stored_key=mechanism.digest(client_key),
            server_key=mechanism.hmac(salted, b"Server Key"),
            iterations=iterations,
        )

    @classmethod
    def from_password(
        cls, mechanism: Mechanism, password: str, iterations: int = MIN_ITERATIONS
    ) -> Credential:
        salt = secrets.token_bytes(32)
        salted = mechanism.salted_password(password, salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)


def _attributes(message: str, expected: str) -> dict[str, str]:
    """``a=1,b=2`` as {a: 1, b: 2}, checking the keys come in the order ``expected`` gives
    (extensions after them are allowed)."""
    result: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        # RFC 5802's attributes are one letter; Kafka's extensions (tokenauth) are words
        if not sep or not key.isalnum() or key in result:
            raise ScramError("invalid SCRAM message")
        result[key] = value
    if list(result)[: len(expected)] != list(expected):
        raise ScramError("invalid SCRAM message")
    return result


def _sasl_name(raw: str) -> str:
    """RFC 5802's saslname: ``=2C`` is ',' and ``=3D`` is '='; any other '=' is invalid."""
    out, i = [], 0
    while i < len(raw):
        if raw[i] == "=":
            code = raw[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                raise ScramError("invalid user name encoding")
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(raw[i])
            i += 1
    return "".join(out)


def _b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ScramError("invalid base64 in SCRAM message") from None


class ScramServer:
    """The server side of one SCRAM exchange. ``lookup(user)`` returns the user's Credential
    for this mechanism or None; ``token_lookup(token_id)`` a live delegation token's
    (credential, owner's user name) or None; ``decoy_key`` seeds the made-up salt of unknown
    users (keep it per broker so a user's made-up salt is the same every time). Feed the
    client's messages to :meth:`evaluate`; when :attr:`complete`, :attr:`username` is
    authenticated (with a token: :attr:`token_owner`, as that token's owner)."""

    def __init__(
        self,
        mechanism: Mechanism,
        lookup: Callable[[str], Credential | None],
        decoy_key: bytes,
        nonce: Callable[[], str] = lambda: secrets.token_urlsafe(24),
        token_lookup: Callable[[str], tuple[Credential, str] | None] = lambda _: None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._token_lookup = token_lookup
        self._decoy_key = decoy_key
        # With tokenauth=true (KIP-48) the user name is a delegation token's id and the
        # authenticated user its owner's name; None otherwise.
        self.token_owner: str | None = None
        self._nonce = nonce
        self._state = "client-first"
        self._credential: Credential | None = None
        self._known = False
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""
        self._gs2_header = ""
        self.username: str | None = None
        self.complete = False

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next message; raises ScramError (the exchange is then
        over: no further message is accepted)."""
        state, self._state = self._state, "failed"
        try:
            message = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("SCRAM message is not UTF-8") from None
        if state == "client-first":
            answer = self._client_first(message)
            self._state = "client-final"
            return answer
        if state == "client-final":
            answer = self._client_final(message)
            self._state = "complete"
            self.complete = True
            return answer
        raise ScramError(f"unexpected SCRAM message in state {state}")

    def _client_first(self, message: str) -> bytes:
        gs2_flag, sep, rest = message.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2:
            raise ScramError("invalid SCRAM client-first message")
        if gs2_flag.startswith("p="):
            raise ScramError("SCRAM channel binding is not supported")
        if gs2_flag not in ("n", "y"):
            raise ScramError("invalid SCRAM client-first message")
        attrs = _attributes(bare, "nr")
        username = _sasl_name(attrs["n"])
        if not username or not attrs["r"]:
            raise ScramError("invalid SCRAM client-first message")
        credential: Credential | None
        if attrs.get("tokenauth", "false").lower() == "true":
            token = self._token_lookup(username)
            if token is None:  # Kafka's words; a token id is not guessable, unlike a user name
                raise ScramError(f"Token Authentication failed: Invalid tokenId : {username}")
            credential, self.token_owner = token
            if authzid and _sasl_name(authzid.removeprefix("a=")) != self.token_owner:
                raise ScramError("authorization id differs from the token's owner")
        else:
            if authzid and _sasl_name(authzid.removeprefix("a=")) != username:
                raise ScramError("authorization id differs from the user name")
            credential = self._lookup(username)
        self._known = credential is not None
        if credential is None:
            decoy = hmac.new(self._decoy_key, username.encode(), "sha256").digest()
            credential = Credential(decoy, decoy, decoy, MIN_ITERATIONS)
        self.username = username
        self._credential = credential
        self._gs2_header = f"{gs2_flag},{authzid},"
        self._client_first_bare = bare
        self._full_nonce = attrs["r"] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._full_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def _client_final(self, message: str) -> bytes:
        without_proof, sep, proof_part = message.rpartition(",p=")
        if not sep:
            raise ScramError("invalid SCRAM client-final message")
        attrs = _attributes(without_proof, "cr")
        if _b64decode(attrs["c"]) != self._gs2_header.encode():
            raise ScramError("invalid SCRAM channel binding")
        # endswith, as Kafka's ScramSaslServer: librdkafka before 2.1 sends its own nonce
        # before the server's full one; the server's part, fresh per exchange, is what counts.
        if not attrs["r"].endswith(self._full_nonce):
            raise ScramError("invalid SCRAM nonce: not the one this exchange issued")
        proof = _b64decode(proof_part)
        credential = self._credential
        assert credential is not None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Authentication failed: Invalid user credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        valid = hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key)
        if not (valid and self._known):
            raise ScramError("Authentication failed: Invalid user credentials")
        server_signature = self.mechanism.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
