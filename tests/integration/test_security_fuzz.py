"""10,000 fuzzed SASL frames (bounded in count and time) against a SASL broker: random and
mutated handshakes, SaslAuthenticate tokens (mutations of real PLAIN and SCRAM messages, random
bytes, truncations), raw token frames after a v0 handshake, and garbage before any handshake.
The broker must answer or close each connection, never log an internal error, and still log a
good user in afterwards."""

from __future__ import annotations

import random
import socket
import struct
import time
from concurrent.futures import ThreadPoolExecutor

from kafka.net.sasl.scram import ScramClient

from kafka_wire import WireClient
from protocol import ApiKey, ClientConnection
from security_helpers import (
    local_brokers_only,
    PLAIN_JAAS,
    SecureBroker,
    add_scram_user,
    log_entries,
    scram_login,
)

pytestmark = local_brokers_only

FRAMES = 10_000
TIME_LIMIT_S = 240
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.3 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif choice < 0.5 and data:
            del data[rng.randrange(len(data)) :]
        elif choice < 0.7:
            data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randint(1, 8))
        else:
            data += bytes(rng.choice([b",", b"=", b"\0", b"r=", b"p=", b"\xff"]))
    return bytes(data)


def _token(rng: random.Random, mechanism: str) -> bytes:
    scram = ScramClient("fuzz-user", "pw", "SCRAM-SHA-256")
    samples = [
        b"\0fuzz-user\0pw",
        b"\0alice\0alice-plain-pw",
        scram.first_message(),
        b"c=biws,r=abc,p=" + b"A" * 44,
        b"n,,n=fuzz-user,r=" + rng.randbytes(8).hex().encode(),
    ]
    kind = rng.random()
    if kind < 0.6:
        return _mutate(rng, rng.choice(samples))
    if kind < 0.9:
        return rng.randbytes(rng.randint(0, 300))
    return rng.choice(samples)[: rng.randint(0, 10)]


def _session(port: int, seed: int) -> int:
    """One connection's fuzz; returns the frames sent."""
    rng = random.Random(seed)
    codec = ClientConnection("fuzz")
    frames: list[bytes] = []
    style = rng.random()
    if style < 0.1:  # garbage frames before any handshake
        for _ in range(rng.randint(1, 3)):
            body = rng.randbytes(rng.randint(0, 40))
            frames.append(struct.pack(">i", len(body)) + body)
    else:
        raw = style < 0.35
        mechanism = rng.choice(MECHANISMS) if rng.random() < 0.9 else _mutate(rng, b"PLAIN")
        if isinstance(mechanism, bytes):
            mechanism = mechanism.decode("utf-8", "replace")
        frames.append(
            codec.request(ApiKey.SASL_HANDSHAKE, 0 if raw else 1, {"mechanism": mechanism})[1]
        )
        for _ in range(rng.randint(1, 4)):
            token = _token(rng, mechanism)
            if raw:
                frames.append(struct.pack(">i", len(token)) + token)
            else:
                version = rng.randint(0, 2)
                frames.append(
                    codec.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token})[1]
                )
        if rng.random() < 0.2:  # and a request it may not make yet
            frames.append(codec.request(ApiKey.METADATA, 1, {"topics": None})[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            for frame in frames:
                sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):  # until the broker closes (it must: bounded by timeout)
                pass
        except OSError:  # reset, broken pipe, or closed before our shutdown: all fine
            pass
    return len(frames)


def test_fuzzed_sasl_frames_never_crash_the_broker(tmp_path):
    broker = SecureBroker(
        tmp_path,
        {"SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        {
            "log.dirs": str(tmp_path / "logs"),
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "plain.sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": "0",
        },
    )
    (tmp_path / "logs").mkdir()
    add_scram_user(broker, "fuzz-user", "pw", "SCRAM-SHA-256")
    broker.start()
    try:
        port = broker.ports["SASL_PLAINTEXT"]
        sent, seed = 0, 0
        started = time.monotonic()
        with ThreadPoolExecutor(4) as pool:
            while sent < FRAMES:
                assert time.monotonic() - started < TIME_LIMIT_S, f"only {sent} frames sent"
                batch = list(pool.map(_session, [port] * 64, range(seed, seed + 64)))
                sent += sum(batch)
                seed += 64
        assert broker.running()
        with WireClient(broker.host, port) as client:
            assert scram_login(client, "SCRAM-SHA-256", "fuzz-user", "pw").error_code == 0
            assert client.call(ApiKey.METADATA, 9, {"topics": None}).brokers
        assert log_entries(broker, "closing connection after an internal error") == []
        assert log_entries(broker, "authentication failed")  # the fuzz did reach SASL
    finally:
        broker.stop()
    assert broker.returncode == 0
