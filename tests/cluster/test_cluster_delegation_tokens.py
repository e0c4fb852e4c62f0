"""Delegation tokens in a cluster (issue #34): every broker advertises the four token apis; a
token created with Kafka 4.1.1's kafka-delegation-tokens.sh bootstrapped on broker 1 is stored in
ZooKeeper in Kafka's format (no HMAC), authenticates Kafka's Java producer and consumer
bootstrapped on broker 2 as its owner (on all three brokers, which lead the topic's partitions),
renewed through broker 2 shows the same expiry through broker 3, and once expired through broker
3 is refused at login by brokers 2 and 1; a broker restarted has the tokens before it serves, and
an expired token is removed from ZooKeeper once. Two brokers' token stores changing one token at
once lose no change (compare-and-set on the znode version), and two removing it at once remove
it once.

Each broker has a PLAINTEXT listener (first: the brokers' own) and a SASL_PLAINTEXT one, both
registered, so the SASL clients are sent to every broker's SASL listener. Renew, expire and
the checks "through broker N" use chronolog's protocol client after a SCRAM login on that
broker's SASL listener (Kafka's admin tool sends its request to a broker it picks). About 14 s
(three brokers, three JVMs)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import uuid

import pytest
import trio
from kafka.net.sasl.scram import ScramClient

from broker.cluster.tokens import CHANGES, TOKENS, ZkTokenStore, parse_token
from broker.cluster.zk import ZooKeeper
from broker.security.credentials import CredentialStore
from broker.security.scram import MECHANISMS
from broker.security.tokens import TokenInfo
from client import BrokerConnection
from protocol import ApiKey
from tests.cluster.helpers import call
from tests.oracle.kafka_oracle import JavaClients, run_kafka_tool
from tests.waiting import wait_for

MECHANISM = "SCRAM-SHA-256"
USERS = {"alice": "alice-pw", "bob": "bob-pw"}
SECRET = "one-secret-for-the-whole-cluster"
TOKEN_COMMAND = "org.apache.kafka.tools.DelegationTokenCommand"


class TokenScram(ScramClient):
    """kafka-python's SCRAM client with Kafka's ``tokenauth=true`` extension."""

    def first_message(self) -> bytes:
        bare = b"n=" + self.user + b",r=" + self.nonce + b",tokenauth=true"
        self.auth_message += bare
        return b"n,," + bare


def _sasl_port(broker) -> int:
    for line in broker.log_output(since_start=True).splitlines():
        if '"listening"' in line:
            entry = json.loads(line)
            if entry["listener"] == "SASL_PLAINTEXT":
                return int(entry["port"])
    raise AssertionError("no SASL_PLAINTEXT listener logged")


def _login(broker, user: str, password: str, token: bool = False) -> BrokerConnection | None:
    """A connection to ``broker``'s SASL listener after a SCRAM login; None when refused."""
    c = BrokerConnection(broker.host, _sasl_port(broker), client_id="tokens", timeout_s=15)
    assert c.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM}).error_code == 0
    scram = (TokenScram if token else ScramClient)(user, password, MECHANISM)
    first = c.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first_message()})
    if first.error_code == 0:
        scram.process_server_first_message(first.auth_bytes)
        final = c.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.final_message()})
        if final.error_code == 0:
            return c
    c.close()
    return None


def _call(broker, user: str, api: ApiKey, version: int, body: dict):
    c = _login(broker, user, USERS[user])
    assert c is not None, f"{user} could not log in"
    with c:
        return c.call(api, version, body)


def _described(broker) -> dict[str, int]:
    """token id -> expiry, as DescribeDelegationToken through ``broker`` lists alice's."""
    owners = [{"principal_type": "User", "principal_name": "alice"}]
    answer = _call(broker, "alice", ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": owners})
    assert answer.error_code == 0
    return {t.token_id: t.expiry_timestamp for t in answer.tokens}


def _token_login(broker, token_id: str, mac: bytes) -> bool:
    c = _login(broker, token_id, base64.b64encode(mac).decode(), token=True)
    if c is None:
        return False
    c.close()
    return True


def _tool(broker, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """Kafka 4.1.1's kafka-delegation-tokens.sh as alice, bootstrapped on ``broker``'s SASL
    listener."""
    properties = tmp_path / f"alice-{uuid.uuid4().hex[:6]}.properties"
    properties.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="alice" password="{USERS["alice"]}";\n'
    )
    return run_kafka_tool(
        TOKEN_COMMAND,
        "--bootstrap-server",
        f"{broker.host}:{_sasl_port(broker)}",
        "--command-config",
        str(properties),
        *args,
        check=False,
    )


def _created(out: str) -> tuple[str, str]:
    """(token id, HMAC in base64) from the tool's --create table."""
    match = re.search(r"^(\S{20,})\s+(\S{80,})\s+\S+\s+\S+", out, re.M)
    assert match, out
    return match[1], match[2]


@pytest.fixture
def sasl_cluster(cluster_factory):
    cluster = cluster_factory(
        3,
        start=False,
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        sasl_enabled_mechanisms=MECHANISM,
        delegation_token_secret_key=SECRET,
        delegation_token_expiry_check_interval_ms=500,
    )
    for broker in cluster.brokers:  # SCRAM users are each broker's own file
        (broker.workdir / "logs").mkdir(parents=True, exist_ok=True)
        store = CredentialStore(broker.log_dir)
        for user, password in USERS.items():
            store.set_password(user, MECHANISMS[MECHANISM], password)
    return cluster.start()


@pytest.mark.kafka_oracle
def test_a_token_made_through_one_broker_works_through_all(sasl_cluster, tmp_path):
    cluster = sasl_cluster
    b1, b2, b3 = cluster.brokers
    versions = call(b2, ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"})  # fmt: skip
    advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert [advertised.get(key) for key in range(38, 42)] == [(1, 3), (1, 2), (1, 2), (1, 3)]
    short = _call(
        b3,
        "alice",
        ApiKey.CREATE_DELEGATION_TOKEN,
        3,
        {"owner_principal_type": None, "owner_principal_name": None, "renewers": [],
         "max_lifetime_ms": 1000},
    )  # fmt: skip
    assert short.error_code == 0
    done = _tool(b1, tmp_path, "--create", "--max-life-time-period", "-1",
                 "--renewer-principal", "User:bob")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    token_id, hmac_text = _created(done.stdout)
    mac = base64.b64decode(hmac_text)

    # in ZooKeeper as Kafka's ZooKeeper mode kept it, without the HMAC
    data, _ = cluster.zk.get(f"{TOKENS}/{token_id}")
    assert json.loads(data)["owner"] == "User%3Aalice"
    stored = parse_token("/t", data)
    assert (stored.owner, stored.requester, stored.renewers) == (
        "User:alice", "User:alice", ("User:bob",)
    )  # fmt: skip
    assert set(json.loads(data)) == {"version", "owner", "tokenRequester", "renewers",
                                     "issueTimestamp", "maxTimestamp", "expiryTimestamp",
                                     "tokenId"}  # fmt: skip
    assert cluster.zk.get_children(CHANGES)

    # a broker started later has the tokens before it serves
    b3.stop()
    b3.port = None  # new ports: the listeners are on port 0
    b3.start()
    assert token_id in _described(b3)

    # broker 2 follows: Kafka's Java clients log in there with the token, as alice
    wait_for(lambda: token_id in _described(b2), "broker 2 knows the token")
    topic = f"tokens-{uuid.uuid4().hex[:8]}"
    assert cluster.create_topic(topic, partitions=3) == 0  # led by all three brokers
    with_token = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{token_id}" password="{hmac_text}" tokenauth="true";',
    }
    with JavaClients(f"{b2.host}:{_sasl_port(b2)}", config=with_token) as java:
        records = [{"partition": i % 3, "value": f"v{i}"} for i in range(6)]
        java.call("produce", topic=topic, records=records)
        read = [java.call("read_partition", topic=topic, partition=p)["records"] for p in range(3)]
    assert [[r["value"] for r in part] for part in read] == [
        ["v0", "v3"],
        ["v1", "v4"],
        ["v2", "v5"],
    ]
    logins = [json.loads(line) for line in b2.log_output().splitlines() if "authenticated" in line]
    assert any(
        e.get("delegation_token") == token_id and e.get("principal") == "User:alice" for e in logins
    )

    # renewed by bob through broker 2: broker 3 describes the same expiry
    renewed = _call(b2, "bob", ApiKey.RENEW_DELEGATION_TOKEN, 2,
                    {"hmac": mac, "renew_period_ms": 600_000})  # fmt: skip
    assert renewed.error_code == 0
    assert renewed.expiry_timestamp_ms != stored.expiry_ms
    wait_for(
        lambda: _described(b3).get(token_id) == renewed.expiry_timestamp_ms,
        "broker 3 describes the renewed expiry",
    )
    described = _tool(b3, tmp_path, "--describe", "--owner-principal", "User:alice")
    assert described.returncode == 0 and token_id in described.stdout, described.stdout

    # expired through broker 3: brokers 2 and 1 refuse it at login
    expired = _call(b3, "alice", ApiKey.EXPIRE_DELEGATION_TOKEN, 2,
                    {"hmac": mac, "expiry_time_period_ms": -1})  # fmt: skip
    assert expired.error_code == 0
    wait_for(lambda: not _token_login(b2, token_id, mac), "broker 2 refuses the expired token")
    wait_for(lambda: not _token_login(b1, token_id, mac), "broker 1 refuses the expired token")
    assert cluster.zk.exists(f"{TOKENS}/{token_id}") is None

    # the short-lived token is swept from ZooKeeper once, by one of the three brokers
    def swept() -> list[str]:
        return [
            line for b in cluster.brokers for line in b.log_output().splitlines()
            if '"delegation token expired"' in line and short.token_id in line
        ]  # fmt: skip

    wait_for(
        lambda: cluster.zk.exists(f"{TOKENS}/{short.token_id}") is None and swept(),
        "the expired token removed",
    )
    assert len(swept()) == 1, swept()
    logs = b1.log_output() + b2.log_output() + b3.log_output()
    assert base64.b64encode(mac).decode() not in logs and mac.hex() not in logs  # a password


async def test_two_brokers_changing_one_token_at_once_lose_nothing(zookeeper):
    """Two stores (two ZooKeeper sessions, as two brokers) each add renewers to one token, 20
    changes interleaved: every renewer is in the node afterwards; then both remove it at once,
    and only one of them did."""
    chroot = f"/tokens-{uuid.uuid4().hex[:8]}"
    sessions = [
        ZooKeeper(zookeeper.connect + chroot, session_timeout_ms=6000,
                  connection_timeout_ms=10000, on_state=lambda state: None)
        for _ in range(2)
    ]  # fmt: skip
    for zk in sessions:
        await zk.start()
    try:
        stores = [ZkTokenStore(zk) for zk in sessions]
        for store in stores:
            await store.load()
        token = TokenInfo("QnwNFBsWR9eYbVyZrBMfnQ", "User:alice", "User:alice", (), 1, 2, 3)
        await stores[0].update(token.token_id, lambda current: token)

        async def add(store: ZkTokenStore, renewer: str) -> None:
            def change(current: TokenInfo | None) -> TokenInfo:
                assert current is not None
                return TokenInfo(current.token_id, current.owner, current.requester,
                                 (*current.renewers, renewer), 1, 2, 3)  # fmt: skip

            await store.update(token.token_id, change)

        async with trio.open_nursery() as nursery:
            for i in range(10):
                for n, store in enumerate(stores):
                    nursery.start_soon(add, store, f"User:b{n}-{i}")
        data, _ = await sessions[0].get(f"{TOKENS}/{token.token_id}")
        assert sorted(parse_token("/t", data).renewers) == sorted(
            f"User:b{n}-{i}" for i in range(10) for n in range(2)
        )

        # both remove it at once (as two brokers' expiry sweeps): one of them removes it
        removals: list[ZkTokenStore] = []

        async def remove(store: ZkTokenStore) -> None:
            removed = []

            def change(current: TokenInfo | None) -> None:
                removed[:] = [] if current is None else [store]
                return None

            await store.update(token.token_id, change)
            removals.extend(removed)

        async with trio.open_nursery() as nursery:
            for store in stores:
                nursery.start_soon(remove, store)
        assert len(removals) == 1
        assert await sessions[0].exists(f"{TOKENS}/{token.token_id}") is None
    finally:
        for zk in sessions:
            await zk.stop()
