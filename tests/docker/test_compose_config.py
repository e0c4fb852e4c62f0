"""docker/docker-compose.yml as Debian's docker-compose resolves it (`docker-compose config`):
the services, the wiring the integration tests depend on, and the base-image switch."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from tests.docker.helpers import ROOT, command_overrides, compose_config, needs_docker_compose

COMPOSE_FILE = ROOT / "docker" / "docker-compose.yml"

pytestmark = needs_docker_compose


def _config(**env) -> dict:
    return compose_config(COMPOSE_FILE, **env)


def test_services_and_named_data_volume():
    config = _config()
    assert set(config["services"]) == {"broker", "broker-secure", "prometheus", "test-runner"}
    assert "chronolog-data" in config["volumes"]
    broker = config["services"]["broker"]
    log_dirs = command_overrides(broker["command"])["log.dirs"]
    assert f"chronolog-data:{log_dirs}:rw" in broker["volumes"]


def test_broker_listens_in_the_network_and_advertises_its_service_name():
    broker = _config()["services"]["broker"]
    command = broker["command"]
    assert command[:2] == ["chronolog", "serve"]
    overrides = command_overrides(command)
    assert overrides["listeners"] == "PLAINTEXT://0.0.0.0:9092"
    assert overrides["advertised.listeners"] == "PLAINTEXT://broker:9092"


def test_healthcheck_is_a_kafka_request_and_the_runner_waits_for_it():
    config = _config()
    test = config["services"]["broker"]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "chronolog", "health"]
    assert test[test.index("--bootstrap") + 1] == "127.0.0.1:9092"
    runner = config["services"]["test-runner"]
    assert runner["depends_on"]["broker"] == {"condition": "service_healthy"}
    assert runner["depends_on"]["prometheus"] == {"condition": "service_started"}
    assert runner["environment"]["CHRONOLOG_BOOTSTRAP"] == "broker:9092"


def test_runner_gets_the_docker_api_socket_it_is_told_about():
    runner = _config()["services"]["test-runner"]
    inside = runner["environment"]["CHRONOLOG_DOCKER_SOCKET"]
    assert f"/var/run/docker.sock:{inside}:rw" in runner["volumes"]
    runner = _config(CHRONOLOG_DOCKER_SOCKET="/tmp/x/podman.sock")["services"]["test-runner"]
    assert f"/tmp/x/podman.sock:{inside}:rw" in runner["volumes"]


def test_base_image_defaults_to_official_python_and_can_be_switched():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    targets = set(re.findall(r"^FROM \S+ AS (\S+)$", dockerfile, re.MULTILINE))
    for base, env in [
        ("python:3.11-slim", {}),
        ("localhost/localbase", {"CHRONOLOG_BASE_IMAGE": "localhost/localbase"}),
    ]:
        for name, service in _config(**env)["services"].items():
            build = service["build"]
            assert build["args"] == {"BASE": base}, name
            assert (Path(build["context"]) / build["dockerfile"]).resolve() == (
                ROOT / "docker" / "Dockerfile"
            ).resolve()
            assert build["target"] in targets, name
    assert "ARG BASE=python:3.11-slim" in dockerfile


def test_broker_command_is_a_configuration_the_broker_accepts():
    from broker.config import load_config

    command = _config()["services"]["broker"]["command"]
    config_path = command[command.index("--config") + 1]
    assert config_path.startswith("/app/")  # the Dockerfile's WORKDIR holds config/
    config = load_config(
        str(ROOT / config_path.removeprefix("/app/")),
        [f"{k}={v}" for k, v in command_overrides(command).items()],
    )
    assert (config.host, config.port) == ("0.0.0.0", 9092)
    assert (config.advertised_host, config.advertised_port) == ("broker", 9092)
    assert list(config.log_dirs) == ["/var/lib/chronolog"]
    assert config.metrics_listener == ("0.0.0.0", 9404)


def test_metrics_and_console_port_is_exposed_in_the_network():
    broker = _config()["services"]["broker"]
    assert command_overrides(broker["command"])["metrics.listener"] == "http://0.0.0.0:9404"
    assert "9404" in [str(p) for p in broker["expose"]]


def test_prometheus_scrapes_the_broker_with_the_dashboards_job():
    config = _config()
    prometheus = config["services"]["prometheus"]
    assert prometheus["build"]["target"] == "prometheus"
    assert "9090" in [str(p) for p in prometheus["expose"]]
    assert config["services"]["test-runner"]["environment"]["CHRONOLOG_PROMETHEUS"] == (
        "http://prometheus:9090"
    )
    scrape = yaml.safe_load((ROOT / "docker" / "prometheus" / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    broker_port = command_overrides(config["services"]["broker"]["command"])["metrics.listener"]
    assert job["job_name"] == "chronolog"  # the job the dashboards select
    assert job["static_configs"] == [{"targets": [f"broker:{broker_port.rsplit(':', 1)[1]}"]}]


def test_secure_broker_is_sasl_ssl_with_certificates_made_at_start():
    """broker-secure: SASL_SSL with SCRAM and ACLs; its certificates and the runner's password
    are made by docker/secure-entrypoint.sh in a volume the runner reads, none in the repository."""
    from broker.config import load_config

    config = _config()
    secure = config["services"]["broker-secure"]
    assert secure["entrypoint"] == ["/usr/local/bin/secure-entrypoint.sh"]
    command = secure["command"]
    loaded = load_config(
        str(ROOT / command[command.index("--config") + 1].removeprefix("/app/")),
        [f"{k}={v}" for k, v in command_overrides(command).items()],
    )
    by_name = {listener.name: listener for listener in loaded.listeners}
    sasl_ssl = by_name["SASL_SSL"]
    assert (sasl_ssl.protocol, sasl_ssl.advertised_host, sasl_ssl.advertised_port) == (
        "SASL_SSL",
        "broker-secure",
        9094,
    )
    assert set(sasl_ssl.sasl_mechanisms) == {"SCRAM-SHA-512", "SCRAM-SHA-256"}
    assert by_name["PLAINTEXT"].host == "127.0.0.1"  # plaintext only inside the container
    assert loaded.security.authorizes and "User:runner" in loaded.security.super_users
    keystore = sasl_ssl.tls.keystore_location
    tls_mount = next(v for v in secure["volumes"] if v.endswith(":/tls:rw"))
    assert keystore.startswith("/tls/")
    runner = config["services"]["test-runner"]
    assert runner["depends_on"]["broker-secure"] == {"condition": "service_healthy"}
    assert runner["environment"]["CHRONOLOG_SECURE_BOOTSTRAP"] == "broker-secure:9094"
    tls_volume = tls_mount.split(":")[0]
    assert f"{tls_volume}:{runner['environment']['CHRONOLOG_TLS_DIR']}:ro" in runner["volumes"]
    script = (ROOT / "docker" / "secure-entrypoint.sh").read_text()
    for made in ("ca.pem", "broker-keystore.pem", "runner.password", "users --log-dir"):
        assert made in script
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "docker/secure-entrypoint.sh /usr/local/bin/secure-entrypoint.sh" in dockerfile
    assert "openssl" in dockerfile


def test_no_private_key_is_committed():
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    holding = [
        name
        for name in listed
        if (ROOT / name).is_file()
        and b"PRIVATE KEY-----" in (ROOT / name).read_bytes()
        and not name.endswith((".py", ".md", ".sh"))
    ]
    assert holding == []
