"""broker/health.py (the container healthcheck) against tiny Kafka-speaking servers built with
protocol.ServerConnection, one scripted answer per request, and against refused, silent,
closing and non-Kafka peers."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from broker import health
from protocol import ApiKey, ErrorCode, ServerConnection, api_versions_body

_BROKERS = [{"node_id": 0, "host": "broker", "port": 9092, "rack": None}]


def _metadata_body(brokers=_BROKERS) -> dict:
    return {"brokers": brokers, "controller_id": 0, "topics": []}


class ScriptedServer:
    """Accepts one connection on 127.0.0.1 and answers each request with ``answer(request)``:
    a body to encode, or the marker bytes CLOSE / SILENT / raw bytes to write as they are."""

    def __init__(self, answer):
        self.answer = answer
        self.requests = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._listener.close()
        self._thread.join(timeout=10)

    def _serve(self):
        self._listener.settimeout(10)
        sock, _ = self._listener.accept()
        conn = ServerConnection()
        with sock:
            sock.settimeout(10)
            while data := sock.recv(65536):
                for request in conn.receive_data(data):
                    self.requests.append(request)
                    reply = self.answer(request)
                    if reply is CLOSE:
                        return
                    if reply is SILENT:
                        sock.recv(1)  # hold the connection open until the client gives up
                        return
                    sock.sendall(reply if isinstance(reply, bytes) else conn.send(request, reply))


CLOSE = object()
SILENT = object()


def _healthy(request):
    if request.header.api_key == ApiKey.API_VERSIONS:
        return api_versions_body()
    return _metadata_body()


def _run(server, capsys, *extra):
    status = health.main(["--bootstrap", f"127.0.0.1:{server.port}", *extra])
    out, err = capsys.readouterr()
    return status, out, err


def test_healthy_broker_exits_0_and_sends_apiversions_then_metadata_for_no_topics(capsys):
    with ScriptedServer(_healthy) as server:
        status, out, err = _run(server, capsys)
    assert status == 0, err
    assert "is healthy" in out and "node 0 at broker:9092" in out
    sent = [(r.header.api_key, r.header.api_version) for r in server.requests]
    assert sent == [(ApiKey.API_VERSIONS, 0), (ApiKey.METADATA, 1)]
    # An empty list (not null) asks for no topics: the check stays cheap with many topics.
    assert list(server.requests[1].body.topics) == []


def test_apiversions_error_code_is_unhealthy(capsys):
    def answer(request):
        return api_versions_body(ErrorCode.UNSUPPORTED_VERSION)

    with ScriptedServer(answer) as server:
        status, out, err = _run(server, capsys)
    assert status == 1 and out == ""
    assert "ApiVersions answered error UNSUPPORTED_VERSION (35)" in err


def test_apiversions_without_metadata_is_unhealthy(capsys):
    def answer(request):
        body = api_versions_body()
        body["api_keys"] = [v for v in body["api_keys"] if v["api_key"] != ApiKey.METADATA]
        return body

    with ScriptedServer(answer) as server:
        status, _, err = _run(server, capsys)
    assert status == 1
    assert "ApiVersions does not list METADATA" in err


def test_metadata_without_brokers_is_unhealthy(capsys):
    def answer(request):
        if request.header.api_key == ApiKey.API_VERSIONS:
            return api_versions_body()
        return _metadata_body(brokers=[])

    with ScriptedServer(answer) as server:
        status, _, err = _run(server, capsys)
    assert status == 1
    assert "Metadata lists no brokers" in err


def test_connection_closed_mid_check_is_unhealthy(capsys):
    def answer(request):
        return api_versions_body() if request.header.api_key == ApiKey.API_VERSIONS else CLOSE

    with ScriptedServer(answer) as server:
        status, _, err = _run(server, capsys)
    assert status == 1
    assert "connection closed by the broker while waiting for METADATA v1" in err


def test_non_kafka_peer_is_unhealthy_without_waiting(capsys):
    # An HTTP server's first four bytes read as a 1.2 GB frame size: refused at once.
    with ScriptedServer(lambda request: b"HTTP/1.1 400 Bad Request\r\n\r\n") as server:
        status, _, err = _run(server, capsys, "--timeout", "30")
    assert status == 1
    assert "undecodable API_VERSIONS v0 response" in err


def test_silent_broker_times_out(capsys):
    with ScriptedServer(lambda request: SILENT) as server:
        status, _, err = _run(server, capsys, "--timeout", "0.5")
    assert status == 1
    assert "no API_VERSIONS v0 response before the timeout" in err


def test_refused_connection_is_unhealthy(capsys):
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    status = health.main(["--bootstrap", f"127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert status == 1
    assert f"broker at 127.0.0.1:{port} is not healthy: cannot connect: Connection refused" in err


@pytest.mark.parametrize("address", ["localhost", "localhost:", ":9092", "host:0", "host:x"])
def test_bad_bootstrap_address_is_a_usage_error(address, capsys):
    with pytest.raises(SystemExit) as exit_info:
        health.main(["--bootstrap", address])
    assert exit_info.value.code == 2
    assert "expected HOST:PORT" in capsys.readouterr().err


def _chronolog_health(bootstrap: str) -> subprocess.CompletedProcess:
    # Through the `chronolog` command line, as the compose healthcheck runs it.
    return subprocess.run(
        [sys.executable, "-m", "broker", "health", "--bootstrap", bootstrap, "--timeout", "10"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_real_broker_is_healthy_and_advertises_its_bootstrap_address(broker):
    result = _chronolog_health(broker.bootstrap)
    assert result.returncode == 0, result.stderr
    assert "is healthy: " in result.stdout
    assert f"node 0 at {broker.bootstrap}, controller 0" in result.stdout


def test_stopped_broker_is_unhealthy(broker_factory):
    proc = broker_factory()
    assert _chronolog_health(proc.bootstrap).returncode == 0
    assert proc.stop() == 0
    result = _chronolog_health(proc.bootstrap)
    assert result.returncode == 1
    assert f"broker at {proc.bootstrap} is not healthy: cannot connect" in result.stderr
