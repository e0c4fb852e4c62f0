"""Helpers of the security tests: a throw-away PKI made with openssl at test time, brokers with
several listeners, and client settings for each client library.

``make_pki(dir)`` writes a CA, the broker's PEM keystore (key + chain, for localhost and
127.0.0.1), its key encrypted with a password, a trusted client certificate (CN=alice,OU=eng,
O=Acme) and an untrusted one (signed by another CA). No private key is committed: every run
makes its own.

``SecureBroker`` is a conftest.BrokerProcess with ``listeners`` of any kind: each listener's
port is read from its "listening" log line (``broker.ports[name]``), kept across restarts, and
the broker is ready when every listener accepts TCP connections.

``SaslTranscript`` runs SASL exchanges on the wire and keeps what they sent and got, so that
``assert_no_secret`` can look for every password, SCRAM key, proof and nonce in the broker's log
and in the error messages it answered.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from broker.security.credentials import FILE_NAME as CREDENTIALS_FILE
from tests.conftest import START_TIMEOUT_S, BrokerProcess
from kafka.net.sasl.scram import ScramClient
from kafka_wire import WireClient
from protocol import ApiKey

KEY_PASSWORD = "keystore-key-pw"

local_brokers_only = pytest.mark.skipif(
    bool(os.environ.get("CHRONOLOG_BOOTSTRAP")),
    reason="starts its own brokers (CHRONOLOG_BOOTSTRAP names an external one)",
)
"""For the modules whose tests start brokers with special listeners (and make a PKI first)."""
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-plain-pw" user_admin="admin-plain-pw";'
)


@dataclass(frozen=True)
class Pki:
    ca: str
    keystore: str  # key + chain, unencrypted
    keystore_encrypted: str  # key encrypted with KEY_PASSWORD + chain
    client_cert: str
    client_key: str
    untrusted_cert: str
    untrusted_key: str


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(directory: Path, name: str) -> None:
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip


def _leaf(directory: Path, name: str, ca: str, subject: str, extensions: str) -> None:
    _openssl(
        "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject,
        cwd=directory,
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
        cwd=directory,
    )  # fmt: skip


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _ca(directory, "ca")
    _ca(directory, "rogue-ca")
    _leaf(
        directory,
        "broker",
        "ca",
        "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    _leaf(directory, "alice", "ca", "/O=Acme/OU=eng/CN=alice", "extendedKeyUsage=clientAuth\n")
    _leaf(directory, "mallory", "rogue-ca", "/CN=mallory", "extendedKeyUsage=clientAuth\n")
    _openssl(
        "pkcs8", "-topk8", "-in", "broker.key", "-out", "broker-enc.key", "-v2", "aes-256-cbc",
        "-passout", f"pass:{KEY_PASSWORD}",
        cwd=directory,
    )  # fmt: skip
    chain = (directory / "broker.crt").read_text() + (directory / "ca.pem").read_text()
    (directory / "broker-keystore.pem").write_text((directory / "broker.key").read_text() + chain)
    (directory / "broker-keystore-enc.pem").write_text(
        (directory / "broker-enc.key").read_text() + chain
    )
    for path in directory.glob("*.key"):
        os.chmod(path, 0o600)
    d = str(directory)
    return Pki(
        ca=f"{d}/ca.pem",
        keystore=f"{d}/broker-keystore.pem",
        keystore_encrypted=f"{d}/broker-keystore-enc.pem",
        client_cert=f"{d}/alice.crt",
        client_key=f"{d}/alice.key",
        untrusted_cert=f"{d}/mallory.crt",
        untrusted_key=f"{d}/mallory.key",
    )


def tls_properties(pki: Pki, client_auth: str = "none", encrypted: bool = False) -> dict:
    props = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": pki.keystore_encrypted if encrypted else pki.keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": pki.ca,
        "ssl.client.auth": client_auth,
    }
    if encrypted:
        props["ssl.key.password"] = KEY_PASSWORD
    return props


class SecureBroker(BrokerProcess):
    """A broker with the listeners ``listeners`` ({name: protocol}, in order; each on a free
    port of 127.0.0.1) and ``overrides``; see the module docstring."""

    def __init__(self, workdir: Path, listeners: dict[str, str], overrides: dict | None = None):
        if os.environ.get("CHRONOLOG_BOOTSTRAP"):
            pytest.skip("needs brokers the tests start (CHRONOLOG_BOOTSTRAP is set)")
        props = {
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in listeners.items()),
            **(overrides or {}),
        }
        super().__init__(workdir, props)
        self.listener_protocols = dict(listeners)
        self.ports: dict[str, int] = {}

    def command(self) -> list[str]:
        self.overrides["listeners"] = ",".join(
            f"{name}://{self.host}:{self.ports.get(name, 0)}" for name in self.listener_protocols
        )
        return super().command()

    def bootstrap_for(self, listener: str) -> str:
        return f"{self.host}:{self.ports[listener]}"

    def start(self) -> SecureBroker:
        assert self.proc is None or self.proc.poll() is not None, "broker already running"
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as out:
            self._log_start = out.tell()
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parents[2],
            )  # fmt: skip
        self.returncode = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                raise RuntimeError(f"broker exited with {self.returncode}:\n{self.log_tail()}")
            ports = self._listening()
            if len(ports) == len(self.listener_protocols) and all(
                _accepts(self.host, port) for port in ports.values()
            ):
                self.ports = ports
                self.port = ports[next(iter(self.listener_protocols))]
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    def _listening(self) -> dict[str, int]:
        ports = {}
        for line in self.log_output(since_start=True).splitlines():
            if '"listening"' in line:
                entry = json.loads(line)
                ports[entry["listener"]] = int(entry["port"])
        return ports


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
        return True
    except OSError:
        return False


def tls_wire(host: str, port: int, pki, cert: tuple[str, str] | None = None) -> WireClient:
    """A WireClient whose socket speaks TLS, trusting the test CA."""
    context = ssl.create_default_context(cafile=pki.ca)
    if cert:
        context.load_cert_chain(*cert)
    client = WireClient(host, port)
    client.socket = client.sock = context.wrap_socket(client.socket, server_hostname="localhost")
    return client


# -- SASL on the wire ----------------------------------------------------------------------


def handshake(client: WireClient, mechanism: str, version: int = 1):
    return client.call(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(client: WireClient, token: bytes, version: int = 2):
    return client.call(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})


def scram_login(client: WireClient, mechanism: str, user: str, password: str):
    """A SCRAM exchange with kafka-python's ScramClient; the last SaslAuthenticate answer."""
    return SaslTranscript().scram_login(client, mechanism, user, password)


class SaslTranscript:
    """What a test module's SASL exchanges on the wire sent and got, for
    :func:`assert_no_secret`: the passwords in its tokens, its SCRAM clients (their proofs,
    nonces and keys) and every error message the broker answered."""

    def __init__(self) -> None:
        self.passwords: set[str] = set()
        self.scram_clients: list[ScramClient] = []
        self.error_messages: list[str] = []

    def sent(self, token: bytes) -> bytes:
        """Note a token about to be sent (a PLAIN one carries a password); returns it."""
        parts = token.split(b"\0")
        if len(parts) == 3:  # PLAIN: authzid NUL user NUL password
            self.passwords.add(parts[2].decode("utf-8", "replace"))
        return token

    def authenticate(self, client: WireClient, token: bytes, version: int = 2):
        answer = authenticate(client, self.sent(token), version)
        self.error_messages.append(answer.error_message or "")
        return answer

    def scram_client(self, user: str, password: str, mechanism: str) -> ScramClient:
        self.passwords.add(password)
        self.scram_clients.append(ScramClient(user, password, mechanism))
        return self.scram_clients[-1]

    def scram_login(self, client: WireClient, mechanism: str, user: str, password: str):
        """:func:`scram_login`, noted."""
        assert handshake(client, mechanism).error_code == 0
        scram = self.scram_client(user, password, mechanism)
        first = self.authenticate(client, scram.first_message())
        if first.error_code:
            return first
        scram.process_server_first_message(first.auth_bytes)
        final = self.authenticate(client, scram.final_message())
        if final.error_code == 0:
            scram.process_server_final_message(final.auth_bytes)
        return final

    def scram_secrets(self) -> set[str]:
        """Each exchange's nonce, proof and keys (as the client computed them, whether or not
        the password was right), in base64 and hex."""
        out = set()
        for scram in self.scram_clients:
            out.add(scram.nonce.decode())
            keys = (scram.salted_password, scram.client_key, scram.stored_key, scram.server_key)
            out |= encodings(*(k for k in (*keys, scram.client_proof) if k is not None))
        return out


def encodings(*values: bytes) -> set[str]:
    """``values`` as base64 and as hex: how a secret would show in a log line."""
    return {text for v in values for text in (base64.b64encode(v).decode(), v.hex())}


SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def scram_file_secrets(broker: BrokerProcess, passwords: dict[str, str]) -> set[str]:
    """The secrets behind every credential in the broker's SCRAM credential file, in base64
    and hex: the salted password, ClientKey, StoredKey and ServerKey (RFC 5802), computed here
    from the user's password in ``passwords`` and the file's salt and iterations, and checked
    against the StoredKey and ServerKey the file holds."""
    doc = json.loads((Path(broker.log_dir) / CREDENTIALS_FILE).read_text())
    out = set()
    for user, mechanisms in doc["users"].items():
        assert user in passwords, f"the test does not know SCRAM user {user}'s password"
        for mechanism, stored in mechanisms.items():
            hash_name = SCRAM_HASHES[mechanism]
            salted = hashlib.pbkdf2_hmac(
                hash_name,
                passwords[user].encode(),
                base64.b64decode(stored["salt"]),
                stored["iterations"],
            )
            client_key = hmac.new(salted, b"Client Key", hash_name).digest()
            stored_key = hashlib.new(hash_name, client_key).digest()
            server_key = hmac.new(salted, b"Server Key", hash_name).digest()
            assert (stored["stored_key"], stored["server_key"]) == (
                base64.b64encode(stored_key).decode(),
                base64.b64encode(server_key).decode(),
            ), (user, mechanism)
            out |= encodings(salted, client_key, stored_key, server_key)
    return out


def assert_no_secret(
    broker: BrokerProcess,
    transcript: SaslTranscript,
    passwords: set[str],
    scram_passwords: dict[str, str] | None = None,
) -> None:
    """No password (``passwords`` and every one ``transcript`` sent) and no SCRAM secret (of the
    credential file's users, whose passwords ``scram_passwords`` gives, and of the transcript's
    exchanges) appears in the broker's log or in an error message it answered."""
    secrets = {*passwords, *transcript.passwords} | transcript.scram_secrets()
    if scram_passwords is not None:
        secrets |= scram_file_secrets(broker, scram_passwords)
    secrets.discard("")
    output = broker.log_output()
    assert sorted(s for s in secrets if s in output) == [], "secrets in the broker's log"
    answered = [m for m in transcript.error_messages if any(s in m for s in secrets)]
    assert answered == [], "secrets in error messages answered to clients"


# -- client settings ------------------------------------------------------------------------


def kafka_python_settings(
    protocol: str, pki: Pki | None = None, mechanism=None, user=None, password=None, cert=False
) -> dict:
    """kafka-python's KafkaProducer/KafkaConsumer/KafkaAdminClient keyword arguments."""
    kw: dict = {"security_protocol": protocol}
    if "SSL" in protocol:
        kw.update(ssl_cafile=pki.ca, ssl_check_hostname=True)
        if cert:
            kw.update(ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key)
    if "SASL" in protocol:
        kw.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    return kw


def librdkafka_settings(
    protocol: str, pki: Pki | None = None, mechanism=None, user=None, password=None, cert=False
) -> dict:
    """confluent-kafka's (librdkafka's) configuration properties; kcat takes them with -X."""
    conf: dict = {"security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = pki.ca
        if cert:
            conf.update({"ssl.certificate.location": pki.client_cert})
            conf.update({"ssl.key.location": pki.client_key})
    if "SASL" in protocol:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def aiokafka_settings(
    protocol: str, pki: Pki | None = None, mechanism=None, user=None, password=None, cert=False
) -> dict:
    """aiokafka's AIOKafkaProducer/AIOKafkaConsumer keyword arguments."""
    kw: dict = {"security_protocol": protocol}
    if "SSL" in protocol:
        from aiokafka.helpers import create_ssl_context

        kw["ssl_context"] = create_ssl_context(
            cafile=pki.ca,
            certfile=pki.client_cert if cert else None,
            keyfile=pki.client_key if cert else None,
        )
    if "SASL" in protocol:
        kw.update(sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=password)
    return kw


def add_scram_user(broker: BrokerProcess, user: str, password: str, mechanism: str) -> None:
    """``chronolog users add`` against the broker's log dir (works while it runs)."""
    subprocess.run(
        [
            *broker.command()[:2],
            "broker", "users", "--log-dir", broker.log_dir, "add", user,
            "--mechanism", mechanism, "--password-stdin",
        ],
        input=password.encode(), check=True, capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip


def log_entries(broker: BrokerProcess, event: str) -> list[dict]:
    """The broker's JSON log lines whose event is ``event``."""
    out = []
    for line in broker.log_output().splitlines():
        if f'"{event}"' in line:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("event") == event:
                out.append(entry)
    return out


def wait_for_log(broker: BrokerProcess, event: str, count: int = 1, timeout: float = 10.0):
    """The ``event`` lines once there are ``count`` of them (AssertionError after timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        entries = log_entries(broker, event)
        if len(entries) >= count or time.monotonic() > deadline:
            assert len(entries) >= count, f"{len(entries)} {event!r} lines, wanted {count}"
            return entries
        time.sleep(0.02)
