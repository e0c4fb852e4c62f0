"""SCRAM and PLAIN servers against kafka-python's SCRAM client (an independent implementation),
the connection's SASL states, and the credential file (0600, no secrets, shared with the CLI)."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.net.sasl.scram import ScramClient

from broker.security.credentials import CredentialStore, Deletion, Upsertion
from broker.security.sasl import IllegalSaslState, PlainServer, SaslFailure, SaslState
from broker.security.scram import SHA256, SHA512, Credential, ScramError, ScramServer
from protocol.errors import ErrorCode

DECOY = b"k" * 32


def exchange(server: ScramServer, client: ScramClient) -> bytes:
    server_first = server.evaluate(client.first_message())
    client.process_server_first_message(server_first)
    server_final = server.evaluate(client.final_message())
    client.process_server_final_message(server_final)  # checks the server's signature
    return server_final


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_scram_round_trip_with_kafka_python_client(mechanism):
    credential = Credential.from_password(mechanism, "pässword", 4096)
    server = ScramServer(mechanism, {"alice": credential}.get, DECOY)
    exchange(server, ScramClient("alice", "pässword", mechanism.name))
    assert server.complete and server.username == "alice"


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_scram_wrong_password_and_unknown_user_fail_alike(mechanism):
    credential = Credential.from_password(mechanism, "right", 4096)
    failures = []
    for user, password in (("alice", "wrong"), ("nobody", "right")):
        server = ScramServer(mechanism, {"alice": credential}.get, DECOY)
        client = ScramClient(user, password, mechanism.name)
        first = server.evaluate(client.first_message())
        assert b",s=" in first and b",i=4096" in first  # an unknown user gets a made-up salt
        client.process_server_first_message(first)
        with pytest.raises(ScramError) as e:
            server.evaluate(client.final_message())
        failures.append(str(e.value))
        assert not server.complete
        with pytest.raises(ScramError):  # the exchange is over
            server.evaluate(client.final_message())
    assert failures[0] == failures[1] == "Authentication failed: Invalid user credentials"


def test_unknown_users_salt_is_stable():
    one = ScramServer(SHA256, lambda u: None, DECOY).evaluate(b"n,,n=ghost,r=abc")
    two = ScramServer(SHA256, lambda u: None, DECOY).evaluate(b"n,,n=ghost,r=xyz")
    assert one.split(b",s=")[1] == two.split(b",s=")[1]


def test_replayed_client_final_is_refused():
    """An eavesdropper replaying a recorded exchange fails: the server's nonce is new."""
    credential = Credential.from_password(SHA256, "pw", 4096)
    lookup = {"alice": credential}.get
    client = ScramClient("alice", "pw", SHA256.name)
    recorded_first = client.first_message()
    server = ScramServer(SHA256, lookup, DECOY)
    client.process_server_first_message(server.evaluate(recorded_first))
    recorded_final = client.final_message()
    server.evaluate(recorded_final)
    assert server.complete
    replay = ScramServer(SHA256, lookup, DECOY)
    replay.evaluate(recorded_first)
    with pytest.raises(ScramError, match="nonce"):
        replay.evaluate(recorded_final)


@pytest.mark.parametrize(
    "first",
    [
        b"",
        b"n,,",
        b"p=tls-unique,,n=alice,r=abc",
        b"x,,n=alice,r=abc",
        b"n,,r=abc,n=alice",
        b"n,,n=al=ice,r=abc",
        b"n,a=bob,n=alice,r=abc",
        b"n,,n=alice,r=abc,tokenauth=true",
        b"\xff\xfe",
    ],
)
def test_malformed_client_first(first):
    server = ScramServer(SHA256, lambda u: None, DECOY)
    with pytest.raises(ScramError):
        server.evaluate(first)


def test_sasl_names_are_unescaped():
    credential = Credential.from_password(SHA256, "pw", 4096)
    server = ScramServer(SHA256, {"a,b=c": credential}.get, DECOY)
    client = ScramClient("a=2Cb=3Dc", "pw", SHA256.name)  # kafka-python sends names as given
    exchange(server, client)
    assert server.username == "a,b=c"


@settings(max_examples=300, deadline=None)
@given(tokens=st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_fuzzed_scram_tokens_only_raise_scram_error(tokens):
    server = ScramServer(SHA512, lambda u: Credential.from_password(SHA512, "x", 4096), DECOY)
    for token in tokens:
        try:
            server.evaluate(token)
        except ScramError:
            return
    assert not server.complete


def test_plain():
    server = PlainServer({"alice": "pw"})
    assert server.evaluate(b"\0alice\0pw") == b"" and server.username == "alice"
    assert PlainServer({"alice": "pw"}).evaluate(b"alice\0alice\0pw") == b""
    for token in (b"\0alice\0nope", b"\0bob\0pw", b"\0alice\0", b"\0\0pw", b"bob\0alice\0pw", b""):
        with pytest.raises(SaslFailure) as e:
            PlainServer({"alice": "pw"}).evaluate(token)
        assert "pw" not in str(e.value).replace("password", "")


def test_sasl_states():
    sasl = SaslState(("PLAIN", "SCRAM-SHA-256"), {"alice": "pw"}, lambda u, m: None, DECOY)
    with pytest.raises(IllegalSaslState):
        sasl.authenticate(b"\0alice\0pw")  # no handshake yet
    assert sasl.handshake("PLAIN", 1) and not sasl.raw_tokens
    with pytest.raises(IllegalSaslState):
        sasl.handshake("PLAIN", 1)
    sasl.authenticate(b"\0alice\0pw")
    assert sasl.complete and sasl.username == "alice"
    raw = SaslState(("PLAIN",), {}, lambda u, m: None, DECOY)
    assert raw.handshake("PLAIN", 0) and raw.raw_tokens
    unsupported = SaslState(("PLAIN",), {}, lambda u, m: None, DECOY)
    assert not unsupported.handshake("SCRAM-SHA-512", 1) and unsupported.state == "failed"


# -- the credential file -----------------------------------------------------------------


def test_credential_file_is_private_and_holds_no_password(tmp_path):
    store = CredentialStore(str(tmp_path))
    assert store.set_password("alice", SHA256, "s3cret-pw", 8192).error == ErrorCode.NONE
    assert store.set_password("alice", SHA512, "s3cret-pw").error == ErrorCode.NONE
    mode = stat.S_IMODE(os.stat(store.path).st_mode)
    assert mode == 0o600
    text = open(store.path).read()
    assert "s3cret-pw" not in text
    salted = SHA256.salted_password(
        "s3cret-pw",
        base64.b64decode(json.loads(text)["users"]["alice"]["SCRAM-SHA-256"]["salt"]),
        8192,
    )
    assert base64.b64encode(salted).decode() not in text
    credential = CredentialStore(str(tmp_path)).lookup("alice", SHA256)
    assert credential.iterations == 8192
    server = ScramServer(SHA256, lambda u: credential, DECOY)
    exchange(server, ScramClient("alice", "s3cret-pw", SHA256.name))


def test_alter_errors_as_kafka(tmp_path):
    store = CredentialStore(str(tmp_path))
    salt, salted = b"salt", b"x" * 32
    results = store.alter(
        [Deletion("ghost", 1)],
        [
            Upsertion("ok", 1, 4096, salt, salted),
            Upsertion("", 1, 4096, salt, salted),
            Upsertion("few", 1, 100, salt, salted),
            Upsertion("many", 2, 20000, salt, salted),
            Upsertion("mech", 9, 4096, salt, salted),
            Upsertion("twice", 1, 4096, salt, salted),
            Upsertion("twice", 1, 4096, salt, salted),
            Upsertion("nosalt", 1, 4096, b"", salted),
        ],
    )
    assert {r.user: r.error for r in results} == {
        "ghost": ErrorCode.RESOURCE_NOT_FOUND,
        "ok": ErrorCode.NONE,
        "": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "few": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "many": ErrorCode.UNACCEPTABLE_CREDENTIAL,
        "mech": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
        "twice": ErrorCode.DUPLICATE_RESOURCE,
        "nosalt": ErrorCode.UNACCEPTABLE_CREDENTIAL,
    }
    assert list(store.users()) == ["ok"]
    assert store.alter([Deletion("ok", 1)], [])[0].error == ErrorCode.NONE
    assert store.users() == {}


def test_cli_changes_reach_a_store_that_already_loaded(tmp_path):
    store = CredentialStore(str(tmp_path))
    assert store.users() == {}

    def cli(*args, stdin=""):
        return subprocess.run(
            [sys.executable, "-m", "broker", "users", "--log-dir", str(tmp_path), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
        )

    added = cli("add", "bob", "--mechanism", "SCRAM-SHA-512", "--password-stdin", stdin="pw\n")
    assert added.returncode == 0, added.stderr
    assert "pw" not in added.stdout.replace(".json", "")
    assert list(store.users()) == ["bob"] and list(store.users()["bob"]) == ["SCRAM-SHA-512"]
    listed = cli("list")
    assert "bob\tSCRAM-SHA-512 (4096 iterations)" in listed.stdout
    assert cli("delete", "nobody").returncode == 1
    assert cli("add", "x", "--iterations", "10", "--password-stdin", stdin="pw\n").returncode == 2
    assert cli("delete", "bob").returncode == 0
    assert store.users() == {}


def test_librdkafka_alter_user_scram_credentials_frame_is_accepted():
    """confluent-kafka 2.16's request as captured: one empty tagged-field section too many."""
    from protocol import ServerConnection

    frame = bytes.fromhex(
        "0000004d0033000000000003000772646b61666b61000102066672616e6b01000020000a736f6d652d73616c"
        "74210805b63d8e42b47f6990f2e8584d10e762f31b67d78abcf4b666dc092822822c000000"
    )
    [request] = ServerConnection().receive_data(frame)
    [upsertion] = request.body.upsertions
    assert (upsertion.name, upsertion.mechanism, upsertion.iterations) == ("frank", 1, 8192)
    assert bytes(upsertion.salt) == b"some-salt" and len(upsertion.salted_password) == 32
