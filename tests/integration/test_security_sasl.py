"""SASL with real clients and on the wire: SASL_PLAINTEXT and SASL_SSL, PLAIN and both SCRAMs,
kafka-python, confluent-kafka, aiokafka and kcat (produce, consume, commit offsets, offsets by
time), SSL with and without client certificates for the same clients; refusals (unauthenticated
requests, wrong password, unknown user, replayed nonce, truncated exchange, unsupported
mechanism), the v0 handshake with raw tokens, KIP-554 through the admin clients, failures
counted in /metrics, and no password or SCRAM secret (salted password, keys, proofs, nonces)
in the broker's log or in an error message it answered."""

from __future__ import annotations

import asyncio
import re
import struct
import subprocess
import time
from itertools import islice
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from clients import ck_poll_values, kcat_offset_for, topic_name
from kafka_wire import WireClient
from protocol import ApiKey
from security_helpers import (
    local_brokers_only,
    PLAIN_JAAS,
    SaslTranscript,
    SecureBroker,
    add_scram_user,
    aiokafka_settings,
    assert_no_secret,
    handshake,
    kafka_python_settings,
    librdkafka_settings,
    log_entries,
    make_pki,
    tls_properties,
    tls_wire,
    wait_for_log,
)
from tests.integration.test_metrics import scrape

pytestmark = local_brokers_only

PASSWORDS = {
    "PLAIN": ("alice", "alice-plain-pw"),
    "SCRAM-SHA-256": ("carol", "carol-scram256-pw"),
    "SCRAM-SHA-512": ("dave", "dave-scram512-pw"),
}
NEW_SCRAM_USER = ("frank", "frank-pw")  # made through the admin APIs
SCRAM_USERS = dict([NEW_SCRAM_USER, *(v for m, v in PASSWORDS.items() if m.startswith("SCRAM"))])
WRONG_PASSWORD = "eve-pw"
SASL = SaslTranscript()
"""Every SASL exchange on the wire goes through it, for the secrets check at the end."""
MESSAGES = 12


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory, pki):
    """PLAINTEXT (for nothing but readiness), SASL_PLAINTEXT, SASL_SSL and SSL (client
    certificates requested) listeners; PLAIN users from JAAS, SCRAM users from the CLI."""
    workdir = tmp_path_factory.mktemp("sasl-broker")
    broker = SecureBroker(
        workdir,
        {
            "PLAINTEXT": "PLAINTEXT",
            "SASL_PLAINTEXT": "SASL_PLAINTEXT",
            "SASL_SSL": "SASL_SSL",
            "SSL": "SSL",
        },
        {
            "log.dirs": str(workdir / "logs"),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "plain.sasl.jaas.config": PLAIN_JAAS,
            "connection.failed.authentication.delay.ms": "300",
            "metrics.listener": "http://127.0.0.1:0",
            **tls_properties(pki, client_auth="requested"),
        },
    )
    (workdir / "logs").mkdir()
    add_scram_user(broker, *PASSWORDS["SCRAM-SHA-256"], "SCRAM-SHA-256")
    add_scram_user(broker, *PASSWORDS["SCRAM-SHA-512"], "SCRAM-SHA-512")
    broker.start()
    yield broker
    broker.stop()
    configured = set(re.findall(r'user_\w+="([^"]*)"', PLAIN_JAAS))
    used = {password for _, password in PASSWORDS.values()} | {WRONG_PASSWORD}
    assert_no_secret(broker, SASL, configured | used | set(SCRAM_USERS.values()), SCRAM_USERS)


def settings_for(make, broker, pki, protocol, mechanism=None, cert=False):
    user, password = PASSWORDS.get(mechanism, (None, None))
    return make(protocol, pki, mechanism, user, password, cert=cert)


CASES = [
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_SSL", "SCRAM-SHA-512"),
    ("SASL_SSL", "PLAIN"),
    ("SSL", None),
]


def produce_stamped(send, flush, topic):
    """MESSAGES messages with timestamps 1000 ms apart; returns the stamps."""
    base = int(time.time() * 1000) - 60_000
    stamps = [base + 1000 * i for i in range(MESSAGES)]
    for i, stamp in enumerate(stamps):
        send(topic, b"m%d" % i, stamp)
    flush()
    return stamps


@pytest.mark.parametrize("protocol,mechanism", CASES)
def test_kafka_python(sasl_broker, pki, protocol, mechanism):
    bootstrap = sasl_broker.bootstrap_for(protocol)
    kw = settings_for(kafka_python_settings, sasl_broker, pki, protocol, mechanism, cert=True)
    topic, group = topic_name("kp-sec"), topic_name("kp-group")
    producer = KafkaProducer(bootstrap_servers=bootstrap, **kw)
    stamps = produce_stamped(
        lambda t, v, ts: producer.send(t, value=v, timestamp_ms=ts),
        lambda: producer.flush(30),
        topic,
    )
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
        **kw,
    )
    got = [message.value for message in islice(consumer, MESSAGES)]
    tp = TopicPartition(topic, 0)
    consumer.commit()
    assert consumer.committed(tp) == MESSAGES
    found = consumer.offsets_for_times({tp: stamps[5]})
    assert found[tp].offset == 5
    consumer.close()
    assert got == [b"m%d" % i for i in range(MESSAGES)]


@pytest.mark.parametrize("protocol,mechanism", CASES)
def test_confluent_kafka(sasl_broker, pki, protocol, mechanism):
    conf = {
        "bootstrap.servers": sasl_broker.bootstrap_for(protocol),
        **settings_for(librdkafka_settings, sasl_broker, pki, protocol, mechanism),
    }
    topic, group = topic_name("ck-sec"), topic_name("ck-group")
    producer = Producer(conf)
    stamps = produce_stamped(
        lambda t, v, ts: producer.produce(t, value=v, timestamp=ts),
        lambda: producer.flush(30),
        topic,
    )
    consumer = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([topic])
        got = ck_poll_values(consumer, MESSAGES)
        assert got == [b"m%d" % i for i in range(MESSAGES)]
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([CkTopicPartition(topic, 0)], timeout=10)
        assert committed.offset == MESSAGES
        [found] = consumer.offsets_for_times([CkTopicPartition(topic, 0, stamps[7])], timeout=10)
        assert found.offset == 7
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol,mechanism", CASES)
def test_aiokafka(sasl_broker, pki, protocol, mechanism):
    bootstrap = sasl_broker.bootstrap_for(protocol)
    kw = settings_for(aiokafka_settings, sasl_broker, pki, protocol, mechanism)
    topic, group = topic_name("aio-sec"), topic_name("aio-group")

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **kw)
        await producer.start()
        try:
            base = int(time.time() * 1000) - 60_000
            for i in range(MESSAGES):
                await producer.send_and_wait(topic, b"m%d" % i, timestamp_ms=base + 1000 * i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **kw,
        )
        await consumer.start()
        try:
            got = []
            async with asyncio.timeout(30):
                async for message in consumer:
                    got.append(message.value)
                    if len(got) == MESSAGES:
                        break
            tp = AioTopicPartition(topic, 0)
            await consumer.commit()
            committed = await consumer.committed(tp)
            found = await consumer.offsets_for_times({tp: base + 3000})
            return got, committed, found[tp].offset
        finally:
            await consumer.stop()

    got, committed, found = asyncio.run(run())
    assert got == [b"m%d" % i for i in range(MESSAGES)]
    assert committed == MESSAGES and found == 3


def next_millisecond() -> int:
    """A wall-clock millisecond later than every timestamp taken before the call."""
    now = int(time.time() * 1000)
    while int(time.time() * 1000) == now:
        time.sleep(0.0002)
    return now + 1


@pytest.mark.parametrize("protocol,mechanism", CASES)
def test_kcat(sasl_broker, pki, protocol, mechanism):
    """kcat produces in three runs, consumes in a group (which commits: a second run resumes
    there) and looks offsets up by time. kcat cannot set a CreateTime, librdkafka stamps the
    wall clock, so the runs are told apart by the instants between them."""
    conf = settings_for(librdkafka_settings, sasl_broker, pki, protocol, mechanism, cert=True)
    options = [arg for key, value in conf.items() for arg in ("-X", f"{key}={value}")]
    bootstrap = sasl_broker.bootstrap_for(protocol)
    kcat = ["kcat", "-b", bootstrap, *options]
    topic, group = topic_name("kcat-sec"), topic_name("kcat-group")
    runs = [range(0, 4), range(4, 8), range(8, MESSAGES)]  # the offsets each run gets
    run_started: list[int] = []

    def produce(run: range) -> None:
        run_started.append(next_millisecond())
        subprocess.run(
            [*kcat, "-P", "-t", topic, "-K:", "-p", "0"],
            input="".join(f"k{i}:v{i}\n" for i in run).encode(),
            check=True,
            timeout=60,
        )

    def consume_in_group() -> list[tuple[int, int, str]]:
        """(offset, timestamp, key:value) from the group's committed offset to the end."""
        out = subprocess.run(
            # auto.offset.reset, not -o beginning: kcat would start every run from -o
            [*kcat, "-X", "auto.offset.reset=earliest", "-G", group, "-e", "-f", "%o %T %k:%s\n"]
            + [topic],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode()
        return [(int(o), int(t), kv) for o, t, kv in (line.split() for line in out.splitlines())]

    def committed() -> int:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            **settings_for(kafka_python_settings, sasl_broker, pki, protocol, mechanism, cert=True),
        )
        try:
            return admin.list_group_offsets({group: None})[group][TopicPartition(topic, 0)].offset
        finally:
            admin.close()

    produce(runs[0])
    produce(runs[1])
    first = consume_in_group()
    assert [(o, kv) for o, _, kv in first] == [(i, f"k{i}:v{i}") for i in range(8)]
    assert committed() == 8
    produce(runs[2])
    second = consume_in_group()
    assert [(o, kv) for o, _, kv in second] == [(i, f"k{i}:v{i}") for i in runs[2]]
    assert committed() == MESSAGES
    stamps = [t for _, t, _ in first + second]
    for run, started, ended in zip(runs, run_started, [*run_started[1:], 2**63]):
        assert all(started <= stamps[i] < ended for i in run), (run_started, stamps)
    # Each run's first offset is the answer for the instant it started (from what was
    # produced), and a stamp inside a run agrees with brute force over what was read.
    for run, started in zip(runs, run_started):
        assert kcat_offset_for(bootstrap, topic, started, options) == run[0]
    inside = stamps[6]
    brute_force = min(i for i, t in enumerate(stamps) if t >= inside)
    assert kcat_offset_for(bootstrap, topic, inside, options) == brute_force
    assert kcat_offset_for(bootstrap, topic, stamps[-1] + 1, options) == -1


# -- on the wire ----------------------------------------------------------------------------


def sasl_client(broker, pki, listener: str) -> WireClient:
    if listener == "SASL_SSL":
        return tls_wire(broker.host, broker.ports[listener], pki)
    return WireClient(broker.host, broker.ports[listener])


UNAUTHENTICATED = [
    (ApiKey.METADATA, 9, {"topics": None}),
    (
        ApiKey.PRODUCE,
        3,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b""}]}],
        },
    ),
    (
        ApiKey.FETCH,
        4,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1000,
            "topics": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}
                    ],
                }
            ],
        },
    ),
]


@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
@pytest.mark.parametrize("api,version,body", UNAUTHENTICATED, ids=["metadata", "produce", "fetch"])
def test_unauthenticated_requests_get_nothing_and_are_closed(
    sasl_broker, pki, listener, api, version, body
):
    with sasl_client(sasl_broker, pki, listener) as client:
        assert client.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0  # allowed before
        client.send(api, version, body)
        assert client.closed_by_peer()
    entries = wait_for_log(
        sasl_broker, "request before SASL authentication; closing the connection"
    )
    assert any(e["api"] == api.name and e["listener"] == listener for e in entries)
    # also straight after a handshake, before the exchange finished
    with sasl_client(sasl_broker, pki, listener) as client:
        assert handshake(client, "PLAIN").error_code == 0
        client.send(api, version, body)
        assert client.closed_by_peer()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_are_refused(sasl_broker, pki, mechanism):
    for user, password in ((PASSWORDS[mechanism][0], WRONG_PASSWORD), ("nobody", WRONG_PASSWORD)):
        with WireClient(sasl_broker.host, sasl_broker.ports["SASL_PLAINTEXT"]) as client:
            started = time.monotonic()
            if mechanism == "PLAIN":
                assert handshake(client, "PLAIN").error_code == 0
                answer = SASL.authenticate(client, f"\0{user}\0{password}".encode())
            else:
                answer = SASL.scram_login(client, mechanism, user, password)
            assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
            assert time.monotonic() - started >= 0.3  # connection.failed.authentication.delay.ms
            assert WRONG_PASSWORD not in (answer.error_message or "")
            assert client.closed_by_peer()
    failed = [
        e
        for e in log_entries(sasl_broker, "authentication failed")
        if e["mechanism"] == mechanism and e["user"] in (PASSWORDS[mechanism][0], "nobody")
    ]
    assert len(failed) >= 2 and all(e["peer"].startswith("127.0.0.1:") for e in failed)


def test_good_logins_on_the_wire_and_v0_raw_tokens(sasl_broker, pki):
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            with sasl_client(sasl_broker, pki, listener) as client:
                answer = SASL.scram_login(client, mechanism, *PASSWORDS[mechanism])
                assert answer.error_code == 0 and answer.session_lifetime_ms == 0
                assert (
                    client.call(ApiKey.METADATA, 9, {"topics": None}).brokers[0].port
                    == (sasl_broker.ports[listener])
                )
                # no re-authentication: a second handshake is an illegal state
                assert handshake(client, mechanism).error_code == 34
    # SaslHandshake v0, then the tokens as raw frames (no Kafka header), as old clients do
    with WireClient(sasl_broker.host, sasl_broker.ports["SASL_PLAINTEXT"]) as client:
        assert handshake(client, "SCRAM-SHA-512", version=0).error_code == 0
        scram = SASL.scram_client(*PASSWORDS["SCRAM-SHA-512"], "SCRAM-SHA-512")
        scram.process_server_first_message(raw_exchange(client, scram.first_message()))
        scram.process_server_final_message(raw_exchange(client, scram.final_message()))
        assert client.call(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        assert client.call(ApiKey.METADATA, 1, {"topics": None}).brokers
    with WireClient(sasl_broker.host, sasl_broker.ports["SASL_PLAINTEXT"]) as client:
        assert handshake(client, "PLAIN", version=0).error_code == 0
        assert raw_exchange(client, b"\0alice\0alice-plain-pw") == b""
        assert client.call(ApiKey.METADATA, 1, {"topics": None}).brokers
    with WireClient(sasl_broker.host, sasl_broker.ports["SASL_PLAINTEXT"]) as client:
        assert handshake(client, "PLAIN", version=0).error_code == 0
        token = SASL.sent(b"\0alice\0" + WRONG_PASSWORD.encode())
        client.sock.sendall(struct.pack(">i", len(token)) + token)
        assert client.closed_by_peer()  # a failed raw exchange is closed without an answer


def raw_exchange(client: WireClient, token: bytes) -> bytes:
    client.sock.sendall(struct.pack(">i", len(token)) + SASL.sent(token))
    head = recv_exactly(client, 4)
    return recv_exactly(client, struct.unpack(">i", head)[0])


def recv_exactly(client: WireClient, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = client.sock.recv(n - len(data))
        assert chunk, "closed by the broker"
        data += chunk
    return data


def test_replayed_nonce_truncated_exchange_and_unknown_mechanism(sasl_broker, pki):
    port = sasl_broker.ports["SASL_PLAINTEXT"]
    user, password = PASSWORDS["SCRAM-SHA-256"]
    # record a good exchange, then replay its messages on a new connection
    with WireClient(sasl_broker.host, port) as client:
        assert handshake(client, "SCRAM-SHA-256").error_code == 0
        scram = SASL.scram_client(user, password, "SCRAM-SHA-256")
        recorded_first = scram.first_message()
        scram.process_server_first_message(SASL.authenticate(client, recorded_first).auth_bytes)
        recorded_final = scram.final_message()
        assert SASL.authenticate(client, recorded_final).error_code == 0
    with WireClient(sasl_broker.host, port) as client:
        assert handshake(client, "SCRAM-SHA-256").error_code == 0
        assert SASL.authenticate(client, recorded_first).error_code == 0
        replayed = SASL.authenticate(client, recorded_final)
        assert replayed.error_code == 58 and "nonce" in replayed.error_message
        assert client.closed_by_peer()
    # a truncated exchange: the client goes away after the first message; the broker is fine
    with WireClient(sasl_broker.host, port) as client:
        assert handshake(client, "SCRAM-SHA-256").error_code == 0
        SASL.authenticate(
            client, SASL.scram_client(user, password, "SCRAM-SHA-256").first_message()
        )
    # a truncated message: the client-final cut short
    with WireClient(sasl_broker.host, port) as client:
        assert handshake(client, "SCRAM-SHA-256").error_code == 0
        scram = SASL.scram_client(user, password, "SCRAM-SHA-256")
        scram.process_server_first_message(
            SASL.authenticate(client, scram.first_message()).auth_bytes
        )
        assert SASL.authenticate(client, scram.final_message()[:20]).error_code == 58
    # SaslAuthenticate without a handshake, and a mechanism that is not enabled
    with WireClient(sasl_broker.host, port) as client:
        assert SASL.authenticate(client, b"\0alice\0alice-plain-pw").error_code == 34
        assert client.closed_by_peer()
    with WireClient(sasl_broker.host, port) as client:
        answer = handshake(client, "GSSAPI")
        assert answer.error_code == 33 and sorted(answer.mechanisms) == sorted(PASSWORDS)
        assert client.closed_by_peer()
    # after all that, a good login still works
    with WireClient(sasl_broker.host, port) as client:
        assert SASL.scram_login(client, "SCRAM-SHA-256", user, password).error_code == 0


def test_sasl_apis_on_a_plaintext_listener_are_illegal(sasl_broker):
    with WireClient(sasl_broker.host, sasl_broker.ports["PLAINTEXT"]) as client:
        assert handshake(client, "PLAIN").error_code == 34
        assert SASL.authenticate(client, b"\0alice\0" + WRONG_PASSWORD.encode()).error_code == 34
        assert client.call(ApiKey.METADATA, 9, {"topics": None}).brokers


def test_failed_authentications_are_counted_per_listener(sasl_broker, pki):
    url = sasl_broker.metrics_url()
    before = scrape(url)
    key = (
        "kafka_server_socket_server_metrics_failed_authentication_total",
        (("listener", "SASL_SSL"),),
    )
    ok_key = (
        "kafka_server_socket_server_metrics_successful_authentication_total",
        (("listener", "SASL_SSL"),),
    )
    for _ in range(2):
        with sasl_client(sasl_broker, pki, "SASL_SSL") as client:
            assert (
                SASL.scram_login(client, "SCRAM-SHA-512", "dave", WRONG_PASSWORD).error_code == 58
            )
    with sasl_client(sasl_broker, pki, "SASL_SSL") as client:
        assert (
            SASL.scram_login(client, "SCRAM-SHA-512", *PASSWORDS["SCRAM-SHA-512"]).error_code == 0
        )
    after = scrape(url)
    assert after[key] - before.get(key, 0) == 2
    assert after[ok_key] - before.get(ok_key, 0) == 1
    connections = ("kafka_server_socketservermetrics_connection_count", (("listener", "SSL"),))
    assert connections in after


def test_scram_users_through_the_admin_apis(sasl_broker, pki):
    """KIP-554 with confluent-kafka's and kafka-python's admin clients; the new user logs in."""
    conf = {
        "bootstrap.servers": sasl_broker.bootstrap_for("SASL_SSL"),
        **librdkafka_settings("SASL_SSL", pki, "SCRAM-SHA-256", *PASSWORDS["SCRAM-SHA-256"]),
    }
    admin = AdminClient(conf)
    user, password = NEW_SCRAM_USER
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
    futures = admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode(), b"some-salt")]
    )
    for future in futures.values():
        assert future.result(30) is None
    described = admin.describe_user_scram_credentials([user])[user].result(30)
    [credential] = described.scram_credential_infos
    del admin  # librdkafka's threads stop with it, not at the broker's stop
    assert (credential.mechanism, credential.iterations) == (ScramMechanism.SCRAM_SHA_256, 8192)
    with WireClient(sasl_broker.host, sasl_broker.ports["SASL_PLAINTEXT"]) as client:
        assert SASL.scram_login(client, "SCRAM-SHA-256", user, password).error_code == 0
    kp_admin = KafkaAdminClient(
        bootstrap_servers=sasl_broker.bootstrap_for("SASL_PLAINTEXT"),
        **kafka_python_settings("SASL_PLAINTEXT", pki, "PLAIN", *PASSWORDS["PLAIN"]),
    )
    try:
        users = kp_admin.describe_user_scram_credentials()
        assert set(SCRAM_USERS) <= set(users)
    finally:
        kp_admin.close()
    text = (Path(sasl_broker.log_dir) / "chronolog-scram-credentials.json").read_text()
    assert password not in text
