"""Delegation tokens (KIP-48) side by side: the same scenario with Kafka 4.1.1's own
kafka-delegation-tokens.sh against a chronolog broker and against Kafka 4.1.1 itself, both with
a SASL/SCRAM-SHA-256 listener, the same SCRAM users (Kafka's made at format time, chronolog's by
``chronolog users``) and a token secret key, and what a user sees compared: whether each step
succeeds, the exception a refused step names, and the token as described (owner, requester,
renewers, lifetimes). The scenario: alice makes a token naming bob as renewer; it is described
for its owner and not without one; bob renews it and carol may not; a session authenticated
with the token may not make tokens (which also proves the token authenticated); alice expires it;
it is no longer described and no longer authenticates. About 50 s (two servers, 18 tool runs)."""

from __future__ import annotations

import re
import subprocess
import uuid
from datetime import datetime
from pathlib import Path

import pytest

from security_helpers import SecureBroker, add_scram_user, local_brokers_only
from tests.oracle.kafka_oracle import KafkaServer, run_kafka_tool
from tests.zookeeper import free_port

pytestmark = [local_brokers_only, pytest.mark.kafka_oracle]

TOKEN_COMMAND = "org.apache.kafka.tools.DelegationTokenCommand"
USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
MECHANISM = "SCRAM-SHA-256"
SECRET = "a-secret-only-the-brokers-know"
# Both sides' token lifetimes: Kafka's defaults, stated so that neither depends on them.
LIFETIMES = {
    "delegation.token.expiry.time.ms": str(24 * 3600 * 1000),
    "delegation.token.max.lifetime.ms": str(7 * 24 * 3600 * 1000),
}
# kafka-delegation-tokens.sh's exception names, as it prints them when a step is refused.
EXCEPTION = re.compile(r"\b(?:org\.apache\.kafka\.common\.errors\.)?(\w+Exception)\b")


def _client_config(user: str, password: str, token: bool = False) -> dict[str, str]:
    extra = ' tokenauth="true"' if token else ""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}"{extra};',
    }


@pytest.fixture(scope="module")
def chronolog_scram(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tokens-chronolog")
    (workdir / "logs").mkdir()
    broker = SecureBroker(
        workdir,
        {"PLAINTEXT": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        {
            "log.dirs": str(workdir / "logs"),
            "sasl.enabled.mechanisms": MECHANISM,
            "delegation.token.secret.key": SECRET,
            **LIFETIMES,
        },
    )
    for user, password in USERS.items():
        add_scram_user(broker, user, password, MECHANISM)
    broker.start()
    yield broker.bootstrap_for("SASL_PLAINTEXT")
    broker.stop()


@pytest.fixture(scope="module")
def kafka_scram(tmp_path_factory):
    """Kafka 4.1.1 (KRaft, one node) with a SCRAM listener beside its PLAINTEXT one; the users
    are written into its metadata log by ``kafka-storage format --add-scram``."""
    scram = [f"{MECHANISM}=[name={user},password={password}]" for user, password in USERS.items()]
    server = KafkaServer(
        tmp_path_factory.mktemp("tokens-kafka"),
        format_args=tuple(arg for entry in scram for arg in ("--add-scram", entry)),
    )
    sasl_port = free_port()
    host = server.host
    server.overrides.update(
        {
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
            ),
            "listeners": f"PLAINTEXT://{host}:{server.port},CONTROLLER://{host}:"
            f"{server.controller_port},SASL_PLAINTEXT://{host}:{sasl_port}",
            "advertised.listeners": (
                f"PLAINTEXT://{host}:{server.port},SASL_PLAINTEXT://{host}:{sasl_port}"
            ),
            "sasl.enabled.mechanisms": MECHANISM,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "delegation.token.secret.key": SECRET,
            **LIFETIMES,
        }
    )
    server.start()
    yield f"{host}:{sasl_port}"
    server.stop()


def _tool(bootstrap: str, workdir: Path, config: dict[str, str], *args: str) -> tuple[bool, str]:
    """(succeeded, output) of kafka-delegation-tokens.sh with ``config`` as its client."""
    properties = workdir / f"client-{uuid.uuid4().hex[:6]}.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    done: subprocess.CompletedProcess[str] = run_kafka_tool(
        TOKEN_COMMAND, "--bootstrap-server", bootstrap, "--command-config", str(properties),
        *args, check=False, timeout=90,
    )  # fmt: skip
    output = done.stdout + done.stderr
    # the tool exits 0 after printing some failures: the exception it names is the outcome
    return done.returncode == 0 and "Exception" not in output, output


def _refusal(output: str) -> str:
    """The exception a refused step names (the most specific: Kafka's own errors first)."""
    names = EXCEPTION.findall(output)
    specific = [n for n in names if n not in ("ExecutionException", "KafkaException")]
    assert specific or names, output
    return (specific or names)[0]


def _tokens(output: str) -> dict[str, dict[str, object]]:
    """The tool's --describe table by token id: owner, requester, renewers, and the expiry and
    maximum as durations after the issue time (whole minutes: the tool prints minutes)."""
    rows: dict[str, dict[str, object]] = {}
    stamp = r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2})"
    pattern = re.compile(
        rf"^(\S{{20,}})\s+(\S{{80,}})\s+(User:\S+)\s+(User:\S+)\s+\[(.*?)\]\s+{stamp}\s+{stamp}\s+"
        rf"{stamp}\s*$",
        re.M,
    )
    for token_id, _, owner, requester, renewers, issued, expires, maximum in pattern.findall(
        output
    ):
        at = [datetime.fromisoformat(t) for t in (issued, expires, maximum)]
        rows[token_id] = {
            "owner": owner,
            "requester": requester,
            "renewers": sorted(r.strip() for r in renewers.split(",") if r.strip()),
            "expires_after_min": round((at[1] - at[0]).total_seconds() / 60),
            "max_after_min": round((at[2] - at[0]).total_seconds() / 60),
        }
    return rows


def _scenario(bootstrap: str, workdir: Path) -> dict[str, object]:
    """What a user of kafka-delegation-tokens.sh sees at each step of the module's scenario."""
    alice, bob, carol = (_client_config(u, p) for u, p in USERS.items())
    seen: dict[str, object] = {}
    ok, out = _tool(bootstrap, workdir, alice, "--create", "--max-life-time-period", "-1",
                    "--renewer-principal", "User:bob")  # fmt: skip
    created = _tokens(out)
    assert ok and len(created) == 1, out
    ((token_id, token),) = created.items()
    mac = re.search(rf"^{re.escape(token_id)}\s+(\S+)", out, re.M)[1]  # type: ignore[index]
    seen["created"] = token

    ok, out = _tool(bootstrap, workdir, alice, "--describe", "--owner-principal", "User:alice")
    seen["described_for_owner"] = (ok, _tokens(out).get(token_id))
    ok, out = _tool(bootstrap, workdir, alice, "--describe")
    seen["described_without_owner"] = (ok, token_id in out)

    ok, out = _tool(bootstrap, workdir, bob, "--renew", "--hmac", mac,
                    "--renew-time-period", "-1")  # fmt: skip
    seen["renewed_by_renewer"] = (ok, "Completed renew operation" in out)
    ok, out = _tool(bootstrap, workdir, carol, "--renew", "--hmac", mac,
                    "--renew-time-period", "-1")  # fmt: skip
    seen["renewed_by_stranger"] = (ok, None if ok else _refusal(out))

    with_token = _client_config(token_id, mac, token=True)
    ok, out = _tool(bootstrap, workdir, with_token, "--create", "--max-life-time-period", "-1")
    seen["created_in_token_session"] = (ok, None if ok else _refusal(out))

    ok, out = _tool(bootstrap, workdir, alice, "--expire", "--hmac", mac,
                    "--expiry-time-period", "-1")  # fmt: skip
    seen["expired_by_owner"] = (ok, "Completed expire operation" in out)
    ok, out = _tool(bootstrap, workdir, alice, "--describe", "--owner-principal", "User:alice")
    seen["described_after_expiry"] = (ok, token_id in out)
    ok, out = _tool(bootstrap, workdir, with_token, "--describe", "--owner-principal",
                    "User:alice")  # fmt: skip
    seen["token_login_after_expiry"] = (ok, None if ok else _refusal(out))
    return seen


def test_the_token_scenario_as_kafka(chronolog_scram, kafka_scram, tmp_path):
    ours = _scenario(chronolog_scram, tmp_path)
    assert ours["created"] == {
        "owner": "User:alice",
        "requester": "User:alice",
        "renewers": ["User:bob"],
        "expires_after_min": 24 * 60,
        "max_after_min": 7 * 24 * 60,
    }
    assert ours["described_for_owner"] == (True, ours["created"])
    assert ours["described_without_owner"] == (True, False)
    assert ours["renewed_by_renewer"] == (True, True)
    assert ours["renewed_by_stranger"] == (False, "DelegationTokenOwnerMismatchException")
    assert ours["created_in_token_session"] == (False, "UnsupportedByAuthenticationException")
    assert ours["expired_by_owner"] == (True, True)
    assert ours["described_after_expiry"] == (True, False)
    assert ours["token_login_after_expiry"][0] is False
    assert _scenario(kafka_scram, tmp_path) == ours
