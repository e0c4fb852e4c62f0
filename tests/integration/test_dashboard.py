"""The dashboards against a real Prometheus (Debian's package) scraping a real broker process.

Prometheus scrapes the broker every second while kafka-python produces, consumes and commits in
two phases (so every counter has moved between two scrapes and every rate is above zero), and
librdkafka commits, aborts and leaves open a transaction. Then:
- every panel of docker/grafana-dashboard.json, with Grafana's variables filled in, is a query
  Prometheus accepts, and the main ones answer with what the test did (bytes on disk, lag);
- the Prometheus console docker/prometheus/consoles/chronolog.html shows the same expressions,
  and in chromium every one of its graphs is drawn; the page is saved as build/dashboard.png
  (README's docs/screenshots/dashboard.png is refreshed from it).

Every wait is bounded: client calls carry timeouts; the waits for Prometheus poll its HTTP API
until the value the test produced appears, with a deadline.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

from tests.integration.clients import create_topic
from tests.waiting import WaitTimeoutError, wait_for

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docker" / "grafana-dashboard.json"
CONSOLES = REPO / "docker" / "prometheus" / "consoles"
BUILD = REPO / "build"
PROMETHEUS = "/usr/bin/prometheus"
JOB = "chronolog"  # the scrape job's name in docker/prometheus/prometheus.yml too
WAIT_S = 60
PER_PHASE = 100
COMMITTED = {0: 30, 1: 55}  # the group's committed offsets; lag = end offset - committed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusAPI:
    """Prometheus' HTTP API at ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str) -> bytes | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.read()
        except OSError:
            return None

    def query(self, expr: str) -> list[dict]:
        """The instant vector (or scalar, as one sample) ``expr`` evaluates to now; an error
        from Prometheus fails the test with its message."""
        body = self.get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert body is not None, f"Prometheus did not answer the query {expr!r}"
        answer = json.loads(body)
        assert answer["status"] == "success", (expr, answer)
        result = answer["data"]["result"]
        if answer["data"]["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return result

    def value(self, expr: str, **labels: str) -> float | None:
        """The value of the sample of ``expr`` carrying ``labels``, or None when there is none."""
        for sample in self.query(expr):
            if all(sample["metric"].get(k) == v for k, v in labels.items()):
                return float(sample["value"][1])
        return None

    def wait_for(self, condition, what: str) -> None:
        """Until ``condition`` holds; fails at once, with the server's log, if it exited."""

        def alive_and_holds() -> bool:
            self.check_alive(what)
            return condition()

        try:
            wait_for(alive_and_holds, what, timeout=WAIT_S, interval=0.2, transient=())
        except WaitTimeoutError as exc:
            raise WaitTimeoutError(f"{exc}{self.tail()}") from None

    def check_alive(self, what: str) -> None:
        """Nothing to check for a server this test did not start."""

    def tail(self) -> str:
        return ""


class PrometheusProcess(PrometheusAPI):
    """A Prometheus server process scraping one target every second, with this repository's
    console templates; stopped (SIGTERM, then SIGKILL) by the fixture."""

    def __init__(self, workdir: Path, target: str) -> None:
        port = free_port()
        super().__init__(f"http://127.0.0.1:{port}")
        config = workdir / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs:\n  - job_name: {JOB}\n"
            f"    static_configs: [{{targets: ['{target}']}}]\n"
        )
        self.log = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 (closed in stop())
        self.process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--web.console.templates={CONSOLES}",
                f"--web.console.libraries={CONSOLES}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        self.wait_for(lambda: self.get("/-/ready") is not None, "Prometheus to be ready")

    def check_alive(self, what: str) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"Prometheus exited while waiting for {what}{self.tail()}")

    def tail(self) -> str:
        self.log.flush()
        lines = Path(self.log.name).read_text(errors="replace").splitlines()[-20:]
        return ":\n" + "\n".join(lines)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@pytest.fixture
def prometheus(tmp_path):
    if not os.path.exists(PROMETHEUS):
        pytest.skip("Debian's prometheus is not installed (make install-test installs it)")
    started: list[PrometheusProcess] = []

    def start(target: str) -> PrometheusProcess:
        started.append(PrometheusProcess(tmp_path, target))
        return started[-1]

    yield start
    for server in started:
        server.stop()


def dashboard_exprs() -> set[str]:
    """Every panel query of the Grafana dashboard as Prometheus sees it: the job variable is the
    scrape job, and Grafana's $__rate_interval becomes the 1m the console uses."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {
        t["expr"].replace("$job", JOB).replace("$__rate_interval", "1m")
        for panel in panels
        for t in panel["targets"]
    }


def console_exprs() -> set[str]:
    page = (CONSOLES / "chronolog.html").read_text()
    return {e for attr in re.findall(r"data-expr='([^']*)'", page) for e in attr.split("|")}


def run_phase(bootstrap: str, topic: str, phase: int) -> None:
    """PER_PHASE messages over both partitions, then a consumer that reads them all."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        for i in range(PER_PHASE):
            producer.send(topic, value=b"dashboard %d/%d" % (phase, i), partition=i % 2)
        producer.flush(30)
    finally:
        producer.close(30)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    try:
        partitions = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        wanted = PER_PHASE * phase
        seen = 0
        deadline = time.monotonic() + WAIT_S
        while seen < wanted and time.monotonic() < deadline:
            seen += sum(len(b) for b in consumer.poll(1000).values())
        assert seen == wanted
    finally:
        consumer.close()


def commit(bootstrap: str, topic: str, group: str) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in COMMITTED.items()}
        )
    finally:
        consumer.close()


def run_transactions(bootstrap: str, topic: str, open_records: int) -> Producer:
    """A committed and an aborted transaction on partition 0, then one left open with
    ``open_records`` records; returns its producer (the transaction stays open while the test
    holds it)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn", "linger.ms": 0}
    )
    producer.init_transactions(30)
    for commit, count in ((True, 3), (False, 2), (None, open_records)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, value=b"txn %d" % i, partition=0)
        assert producer.flush(30) == 0
        if commit is True:
            producer.commit_transaction(30)
        elif commit is False:
            producer.abort_transaction(30)
    return producer


def test_dashboards_show_what_clients_did(broker_factory, prometheus, browser):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    target = urllib.parse.urlsplit(broker.metrics_url()).netloc
    prom = prometheus(target)
    prom.wait_for(lambda: prom.value(f'up{{job="{JOB}"}}') == 1.0, "the broker's first scrape")

    topic = f"dashboard-{uuid.uuid4().hex[:8]}"
    group = f"dashboard-group-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, partitions=2)
    messages_in = (
        f'sum(kafka_server_brokertopicmetrics_messagesin_total{{job="{JOB}",topic="{topic}"}})'
    )
    bytes_out = (
        f'sum(kafka_server_brokertopicmetrics_bytesout_total{{job="{JOB}",topic="{topic}"}})'
    )
    seen_out = 0.0
    for phase in (1, 2):
        run_phase(broker.bootstrap, topic, phase)
        prom.wait_for(
            lambda phase=phase: prom.value(messages_in) == PER_PHASE * phase,
            f"Prometheus to have scraped phase {phase}'s {PER_PHASE * phase} messages",
        )
        # and its reads, in a scrape of their own (a scrape between the phase's produce and
        # its reads would leave bytes out flat between two phases: a rate of 0)
        prom.wait_for(
            lambda seen=seen_out: (prom.value(bytes_out) or 0) > seen,
            f"Prometheus to have scraped phase {phase}'s reads",
        )
        seen_out = prom.value(bytes_out) or 0
    commit(broker.bootstrap, topic, group)
    lag = f'sum by (group, topic) (kafka_consumergroup_lag{{job="{JOB}"}})'
    expected_lag = 2 * PER_PHASE - sum(COMMITTED.values())
    prom.wait_for(
        lambda: prom.value(lag, group=group, topic=topic) == expected_lag,
        f"the group's lag {expected_lag} in Prometheus",
    )

    # Transactions: one open (holding its partition's LSO back), one committed, one aborted.
    txn_topic = f"dashboard-txn-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, txn_topic, partitions=1)
    open_records = 4
    txn_producer = run_transactions(broker.bootstrap, txn_topic, open_records)
    lso_lag = f'max by (topic) (kafka_cluster_partition_laststableoffsetlag{{job="{JOB}"}})'
    prom.wait_for(
        lambda: prom.value(lso_lag, topic=txn_topic) == open_records,
        f"the LSO lag {open_records} of the open transaction",
    )
    assert prom.value(f'sum(chronolog_transactions{{job="{JOB}",state="Ongoing"}})') == 1
    ended = f'sum by (result) (rate(chronolog_transactions_completed_total{{job="{JOB}"}}[1m]))'
    prom.wait_for(
        lambda: (prom.value(ended, result="commit") or 0) > 0
        and (prom.value(ended, result="abort") or 0) > 0,
        "a rate of committed and of aborted transactions",
    )

    # Every Grafana panel is a query Prometheus accepts; the console shows the same panels.
    grafana = dashboard_exprs()
    for expr in sorted(grafana):
        prom.query(expr)
    console = console_exprs()
    assert len(console) >= 7 and console <= grafana, console - grafana

    # The main panels answer with what the test did.
    rate = 'sum by (topic) (rate(kafka_server_brokertopicmetrics_messagesin_total{job="%s"}[1m]))'
    assert prom.value(rate % JOB, topic=topic) > 0
    for direction in ("in", "out"):
        expr = (
            f'sum(rate(kafka_server_brokertopicmetrics_bytes{direction}_total{{job="{JOB}"}}[1m]))'
        )
        assert prom.value(expr) > 0, direction
    on_disk = sum(
        os.path.getsize(os.path.join(root, name))
        for root, _, names in os.walk(broker.log_dir)
        if os.path.basename(root).startswith(topic + "-")
        for name in names
        if name.endswith(".log")
    )
    size = f'sum by (topic) (kafka_log_log_size{{job="{JOB}"}})'
    prom.wait_for(lambda: prom.value(size, topic=topic) == on_disk, f"log size {on_disk} B")
    p99 = 'histogram_quantile(0.99, sum by (request, le) (rate(kafka_network_requestmetrics_totaltimems_bucket{job="%s"}[1m])))'
    assert prom.value(p99 % JOB, request="Produce") > 0

    # The console draws every graph, with the test's topic and group in the legends.
    browser.set_window_size(1280, 1500)
    browser.get(f"{prom.url}/consoles/chronolog.html?duration=20")
    assert "up" in browser.find_element("id", "targets").text
    graphs = browser.find_elements("css selector", "div.graph")
    assert len(graphs) == 8
    deadline = time.monotonic() + WAIT_S
    while not all(g.find_elements("css selector", "svg path") for g in graphs):
        assert time.monotonic() < deadline, "the console's graphs were not all drawn"
        time.sleep(0.2)
    legends = browser.find_element("css selector", "div.panels").text
    assert topic in legends and f"{group} / {topic}" in legends
    assert txn_topic in legends and "ongoing" in legends
    BUILD.mkdir(exist_ok=True)
    browser.save_screenshot(str(BUILD / "dashboard.png"))
    txn_producer.abort_transaction(30)


@pytest.mark.skipif(
    not os.environ.get("CHRONOLOG_PROMETHEUS"),
    reason="docker/docker-compose.yml's Prometheus service (CHRONOLOG_PROMETHEUS) is not set",
)
def test_compose_prometheus_scrapes_the_broker(broker):
    """In docker/docker-compose.yml: the Prometheus service scrapes the broker service, and its
    chronolog console shows the broker's target up and a topic produced here."""
    prom = PrometheusAPI(os.environ["CHRONOLOG_PROMETHEUS"].rstrip("/"))
    prom.wait_for(lambda: prom.value(f'up{{job="{JOB}"}}') == 1.0, "a scrape of the broker")
    topic = f"dashboard-compose-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for i in range(10):
            producer.send(topic, value=b"%d" % i)
        producer.flush(30)
    finally:
        producer.close(30)
    messages_in = (
        f'sum(kafka_server_brokertopicmetrics_messagesin_total{{job="{JOB}",topic="{topic}"}})'
    )
    prom.wait_for(lambda: prom.value(messages_in) == 10.0, "the topic's 10 messages")
    page = (prom.get("/consoles/chronolog.html") or b"").decode()
    assert 'class="up">broker:9404 (up)' in page
