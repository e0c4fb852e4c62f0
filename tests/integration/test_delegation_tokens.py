"""Delegation tokens (KIP-48) on a single broker: Kafka's Java producer and consumer authenticate
with a token made by Kafka 4.1.1's own kafka-delegation-tokens.sh (SCRAM with tokenauth=true) as
its owner; a session authenticated with a token may not make tokens; an expired token no longer
authenticates; the token apis on a PLAINTEXT listener answer as Kafka 4.1.1's do. The tool's
whole create, describe, renew and expire scenario is compared with Kafka 4.1.1's answers in
test_delegation_tokens_beside_kafka.py. About 25 s (a few tool runs and one Java client JVM)."""

from __future__ import annotations

import json
import re
import subprocess
import uuid

import pytest

from client import BrokerConnection
from protocol import ApiKey
from security_helpers import SecureBroker, add_scram_user, local_brokers_only
from tests.oracle.kafka_oracle import JavaClients, JavaClientError, kafka_oracle, run_kafka_tool

pytestmark = [local_brokers_only, pytest.mark.kafka_oracle]
__all__ = ["kafka_oracle"]

TOKEN_COMMAND = "org.apache.kafka.tools.DelegationTokenCommand"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
MECHANISM = "SCRAM-SHA-256"


def _jaas(user: str, password: str, token: bool = False) -> str:
    extra = ' tokenauth="true"' if token else ""
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}"{extra};'
    )


def _client_config(user: str, password: str, token: bool = False) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.jaas.config": _jaas(user, password, token),
    }


@pytest.fixture(scope="module")
def token_broker(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tokens")
    broker = SecureBroker(
        workdir,
        {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        {
            "log.dirs": str(workdir / "logs"),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "delegation.token.secret.key": "a-secret-only-the-broker-knows",
        },
    )
    (workdir / "logs").mkdir()
    for user, password in USERS.items():
        add_scram_user(broker, user, password, MECHANISM)
    broker.start()
    yield broker
    broker.stop()


def _tool(broker, tmp_path, config: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    properties = tmp_path / f"client-{uuid.uuid4().hex[:6]}.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    return run_kafka_tool(
        TOKEN_COMMAND,
        "--bootstrap-server",
        broker.bootstrap_for("SASL_PLAINTEXT"),
        "--command-config",
        str(properties),
        *args,
        check=False,
    )


def _created(out: str) -> tuple[str, str]:
    """(token id, HMAC) from the tool's --create table."""
    match = re.search(r"^(\S{20,})\s+(\S{80,})\s+\S+\s+\S+", out, re.M)
    assert match, out
    return match[1], match[2]


def test_java_clients_authenticate_with_a_token_as_its_owner(token_broker, tmp_path):
    done = _tool(token_broker, tmp_path, _client_config("alice", USERS["alice"]), "--create",
                 "--max-life-time-period", "-1")  # fmt: skip
    token_id, mac = _created(done.stdout)
    with_token = _client_config(token_id, mac, token=True)
    topic = f"tokens-{uuid.uuid4().hex[:8]}"
    with JavaClients(token_broker.bootstrap_for("SASL_PLAINTEXT"), config=with_token) as java:
        java.call("create_topic", topic=topic, partitions=1)
        java.call("produce", topic=topic, records=[{"value": f"v{i}"} for i in range(5)])
        read = java.call("read_partition", topic=topic, partition=0)
        assert [r["value"] for r in read["records"]] == [f"v{i}" for i in range(5)]
    assert mac not in token_broker.log_output()  # the HMAC is a password: never logged
    logins = [json.loads(line) for line in token_broker.log_output().splitlines()]
    assert any(
        e.get("event") == "authenticated"
        and e.get("delegation_token") == token_id
        and e["principal"] == "User:alice"
        for e in logins
    )

    # a session authenticated with a token may not make tokens (Kafka's allowTokenRequests)
    again = _tool(token_broker, tmp_path, with_token, "--create", "--max-life-time-period", "-1")
    assert again.returncode != 0
    assert "UnsupportedByAuthenticationException" in again.stdout + again.stderr

    # expired now: the token no longer authenticates
    _tool(token_broker, tmp_path, _client_config("alice", USERS["alice"]), "--expire",
          "--hmac", mac, "--expiry-time-period", "-1")  # fmt: skip
    with JavaClients(token_broker.bootstrap_for("SASL_PLAINTEXT"), config=with_token) as java:
        with pytest.raises(JavaClientError) as refused:
            java.call("create_topic", topic=topic + "-2", partitions=1, timeout=60)
    assert "Authentication failed" in str(refused.value) or "SaslAuthentication" in str(
        refused.value
    )


def _plaintext_answers(host: str, port: int) -> dict[str, tuple]:
    """The four token apis over a PLAINTEXT connection: (error, a field that says more)."""
    with BrokerConnection(host, port, client_id="tokens", timeout_s=15) as c:
        create = c.call(
            ApiKey.CREATE_DELEGATION_TOKEN,
            3,
            {"owner_principal_type": None, "owner_principal_name": None, "renewers": [],
             "max_lifetime_ms": -1},
        )  # fmt: skip
        renew = c.call(ApiKey.RENEW_DELEGATION_TOKEN, 2, {"hmac": b"x", "renew_period_ms": -1})
        expire = c.call(
            ApiKey.EXPIRE_DELEGATION_TOKEN, 2, {"hmac": b"x", "expiry_time_period_ms": -1}
        )
        describe = c.call(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": None})
    return {
        "create": (create.error_code, create.principal_type, create.principal_name,
                   create.token_id, create.hmac),
        "renew": (renew.error_code, renew.expiry_timestamp_ms),
        "expire": (expire.error_code, expire.expiry_timestamp_ms),
        "describe": (describe.error_code, len(describe.tokens)),
    }  # fmt: skip


def test_token_apis_on_a_plaintext_listener_answer_as_kafka(token_broker, kafka_oracle):
    ours = _plaintext_answers(token_broker.host, token_broker.ports["PLAINTEXT"])
    kafkas = _plaintext_answers(kafka_oracle.host, kafka_oracle.port)
    assert ours == kafkas
    assert ours["create"][0] == 64  # DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
