"""The web console of a real broker process (``metrics.listener``), in Debian's chromium driven by
selenium, headless: what a user sees on each page is checked against an independent oracle
(kafka-python's offsets_for_times, the .log files on disk, the offset the test committed, the
configs confluent-kafka's admin client describes); secrets set in the broker's properties never
reach a page.
Each test saves a screenshot to build/console-*.png.

Also, without a browser: unknown paths are 404, the destructive actions are refused while the
console is read-only, and malformed HTTP does not end the broker.

Every wait is bounded: client calls carry timeouts, the browser an implicit wait.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from broker.cli import main as chronolog

WAIT_S = 30
BUILD = Path(__file__).resolve().parents[2] / "build"
BASE_MS = 1_700_000_000_000
SEGMENT_BYTES = 600  # a few batches per segment


def console_url(broker) -> str:
    """The console is served at the root of the metrics listener."""
    return broker.metrics_url().removesuffix("/metrics")


def screenshot(driver, name: str) -> None:
    """The whole page (the window grown to the document's height) as build/console-NAME.png."""
    BUILD.mkdir(exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(height + 160, 600), 4000))
    driver.save_screenshot(str(BUILD / f"console-{name}.png"))


def create_topic(broker, topic: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1, config=configs)]).values():
        future.result(WAIT_S)


def produce_out_of_order(broker, topic: str) -> list[int]:
    """40 messages, each its own batch, with timestamps that go back and forth; the partition
    rolls several times. Returns the timestamps by offset."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, acks="all")
    stamps = []
    try:
        for i in range(40):
            ts = BASE_MS + i * 1000 + (5000 if i % 7 == 3 else 0) - (3000 if i % 5 == 4 else 0)
            stamps.append(ts)
            value = json.dumps({"n": i, "note": "<b>&"}).encode() if i % 2 else b"\xff\x00raw"
            producer.send(
                topic, value=value, key=b"key-%d" % i, timestamp_ms=ts, headers=[("h", b"v")]
            ).get(WAIT_S)
    finally:
        producer.close(WAIT_S)
    return stamps


def test_topics_page_lists_the_topics(broker_factory, browser):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    topics = [f"console-{uuid.uuid4().hex[:6]}-{n}" for n in ("a", "b")]
    create_topic(broker, topics[0], 3)
    create_topic(broker, topics[1], 1, **{"retention.ms": "3600000"})
    produce_out_of_order(broker, topics[1])
    browser.get(console_url(broker) + "/")
    rows = {
        r.get_attribute("data-topic"): r for r in browser.find_elements("css selector", "tr.topic")
    }
    assert set(topics) <= set(rows)
    assert len(rows[topics[0]].find_elements("css selector", "a.partition")) == 3
    assert rows[topics[1]].find_element("css selector", ".messages").text == "40"
    rows[topics[1]].find_element("css selector", "summary").click()
    assert "3600000" in rows[topics[1]].text
    screenshot(browser, "topics")


def test_message_browser_finds_the_same_offset_as_list_offsets(broker_factory, browser):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    topic = f"console-time-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    stamps = produce_out_of_order(broker, topic)
    files = [
        f for f in os.listdir(os.path.join(broker.log_dir, f"{topic}-0")) if f.endswith(".log")
    ]
    assert len(files) >= 3, "the partition should have rolled"
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=WAIT_S * 1000)
    tp = KTopicPartition(topic, 0)
    base = console_url(broker)
    try:
        # times between and at out-of-order timestamps, and one after the last
        for target in (BASE_MS + 3500, BASE_MS + 8_000, BASE_MS + 21_000, max(stamps) + 1):
            expected = consumer.offsets_for_times({tp: target})[tp]
            browser.get(f"{base}/topics/{topic}/0/messages?ms={target}")
            first = browser.find_elements("css selector", "tr.message")
            if expected is None:
                assert first == []
                assert "No message has a timestamp" in browser.find_element("id", "status").text
                continue
            assert int(first[0].get_attribute("data-offset")) == expected.offset
            assert int(first[0].get_attribute("data-timestamp")) == stamps[expected.offset]
            assert int(browser.find_element("id", "found-offset").text) == expected.offset
    finally:
        consumer.close()
    # the date-time field (UTC) fills the ms field and finds the same offset
    target = BASE_MS + 12_000
    browser.get(f"{base}/topics/{topic}/0/messages")
    at = browser.find_element("id", "at")
    browser.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))",
        at,
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(target / 1000)) + ".000",
    )
    assert browser.find_element("id", "ms").get_attribute("value") == str(target)
    browser.find_element("id", "find-time").click()
    expected_offset = min(i for i, ts in enumerate(stamps) if ts >= target)
    assert int(browser.find_element("id", "found-offset").text) == expected_offset
    # values: JSON pretty-printed and escaped, raw bytes as hex; pages follow by offset
    rows = browser.find_elements("css selector", "tr.message")
    texts = {int(r.get_attribute("data-offset")): r.text for r in rows}
    odd = next(o for o in texts if o % 2)
    assert f'"n": {odd}' in texts[odd] and "<b>&" in texts[odd]
    even = next(o for o in texts if o % 2 == 0)
    assert "ff 00 72 61 77" in texts[even]
    assert "CreateTime" in texts[even]
    screenshot(browser, "messages")
    browser.find_element("id", "next").click()
    next_first = browser.find_elements("css selector", "tr.message")[0]
    assert int(next_first.get_attribute("data-offset")) == max(texts) + 1


def test_segment_timeline_shows_every_segment(broker_factory, browser):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    topic = f"console-seg-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    produce_out_of_order(broker, topic)
    directory = os.path.join(broker.log_dir, f"{topic}-0")
    on_disk = sorted(int(f[: -len(".log")]) for f in os.listdir(directory) if f.endswith(".log"))
    assert len(on_disk) >= 3
    browser.get(f"{broker.metrics_url().removesuffix('/metrics')}/topics/{topic}/0")
    drawn = browser.find_elements("css selector", "#timeline g.segment")
    assert sorted(int(g.get_attribute("data-base-offset")) for g in drawn) == on_disk
    for g in drawn:  # every bar is visible
        assert float(g.find_element("tag name", "rect").get_attribute("width")) >= 2
    rows = browser.find_elements("css selector", "#segments tbody tr")
    sizes = {int(r.get_attribute("data-base-offset")): r for r in rows}
    for base in on_disk:
        size = os.path.getsize(os.path.join(directory, f"{base:020d}.log"))
        assert sizes[base].find_elements("css selector", "td")[2].get_attribute("title") == (
            f"{size} bytes"
        )
    screenshot(browser, "partition")


def test_group_page_shows_the_lag(broker_factory, browser):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    topic = f"console-lag-{uuid.uuid4().hex[:6]}"
    group = f"console-group-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        for i in range(30):
            producer.send(topic, b"m%d" % i, partition=i % 2).get(WAIT_S)
    finally:
        producer.close(WAIT_S)
    gone = f"{topic}-gone"  # committed on, then deleted: its offset stays, with no log end
    create_topic(broker, gone, 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        committed = consumer.commit(
            offsets=[
                TopicPartition(topic, 0, 4),
                TopicPartition(topic, 1, 11),
                TopicPartition(gone, 0, 0),
            ],
            asynchronous=False,
        )
        assert [tp.error for tp in committed] == [None, None, None]
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([gone])[gone].result(WAIT_S)
    base = console_url(broker)
    browser.get(f"{base}/groups")
    row = browser.find_element("css selector", f'#groups tr[data-group="{group}"]')
    cells = [c.text for c in row.find_elements("css selector", "td")]
    assert cells[2:] == ["3", str(15 - 4 + 15 - 11)]  # partitions committed, total lag
    browser.find_element("link text", group).click()
    lag = {
        (r.get_attribute("data-topic"), int(r.get_attribute("data-partition"))): r.find_element(
            "css selector", ".lag"
        ).text
        for r in browser.find_elements("css selector", "#lag tbody tr")
    }
    assert lag == {(topic, 0): str(15 - 4), (topic, 1): str(15 - 11), (gone, 0): ""}
    bars = browser.find_elements("css selector", "#lag-chart rect")
    widths = [float(b.get_attribute("width")) for b in bars]
    assert len(widths) == 3 and widths[0] > widths[1] > 0 == widths[2]
    screenshot(browser, "group")


def transactional_producer(broker, txid: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": txid, "linger.ms": 0}
    )
    producer.init_transactions(WAIT_S)
    return producer


def in_transaction(producer: Producer, topic: str, values: list[bytes], commit: bool | None):
    """One transaction of ``values`` on partition 0, committed, aborted, or left open (None)."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(WAIT_S) == 0
    if commit is True:
        producer.commit_transaction(WAIT_S)
    elif commit is False:
        producer.abort_transaction(WAIT_S)


def read_all(broker, topic: str, isolation: str) -> dict[int, bytes]:
    """offset -> value of every record a consumer at ``isolation`` reads from partition 0, up
    to the end that isolation level sees (the LSO for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"console-read-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    got: dict[int, bytes] = {}
    try:
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), WAIT_S)
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + WAIT_S
        while consumer.position([TopicPartition(topic, 0)])[0].offset < end:
            assert time.monotonic() < deadline, f"{isolation} consumer stuck before {end}: {got}"
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got[m.offset()] = m.value()
    finally:
        consumer.close()
    return got


def test_console_shows_transactions_markers_and_the_lso(broker_factory, browser):
    """Transactions committed, aborted and left open by librdkafka: the messages view marks
    the records a read_committed consumer never reads (aborted) or cannot read yet (open), and
    shows as control batches the offsets no consumer is given; the partition page's LSO and
    open transaction are what consumers see; the Transactions page lists the ids."""
    broker = broker_factory(
        {"metrics.listener": "http://127.0.0.1:0", "transaction.state.log.num.partitions": "1"}
    )
    topic = f"console-txn-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, 1)
    txids = {name: f"console-{name}-{uuid.uuid4().hex[:6]}" for name in ("ok", "no", "open")}
    ok = transactional_producer(broker, txids["ok"])
    no = transactional_producer(broker, txids["no"])
    still_open = transactional_producer(broker, txids["open"])
    try:
        in_transaction(ok, topic, [b"kept-1", b"kept-2"], commit=True)
        in_transaction(no, topic, [b"dropped-1", b"dropped-2"], commit=False)
        in_transaction(ok, topic, [b"kept-3"], commit=True)
        in_transaction(still_open, topic, [b"pending-1"], commit=None)
        in_transaction(no, topic, [b"dropped-3"], commit=False)

        committed = read_all(broker, topic, "read_committed")
        uncommitted = read_all(broker, topic, "read_uncommitted")
        assert sorted(committed.values()) == [b"kept-1", b"kept-2", b"kept-3"]
        base = console_url(broker)
        browser.get(f"{base}/topics/{topic}/0/messages")
        records = {
            int(r.get_attribute("data-offset")): r
            for r in browser.find_elements("css selector", "tr.message")
        }
        controls = {
            int(r.get_attribute("data-offset")): r.get_attribute("data-kind")
            for r in browser.find_elements("css selector", "tr.control")
        }
        # every record a read_uncommitted consumer reads is a record row; every other offset
        # of the partition is a marker (consumers are never given control batches)
        assert set(records) == set(uncommitted)
        lso = int(browser.find_element("id", "lso").text)
        log_end = max(set(records) | set(controls)) + 1
        assert set(controls) == set(range(log_end)) - set(uncommitted)
        assert sorted(controls.values()) == ["ABORT", "ABORT", "COMMIT", "COMMIT"]
        marks = {o: r.get_attribute("data-txn") for o, r in records.items()}
        for offset, value in uncommitted.items():
            if offset in committed:
                assert marks[offset] == "committed", offset
            elif value.startswith(b"dropped"):
                assert marks[offset] == "aborted", offset
                assert "aborted" in records[offset].find_element("css selector", ".badge").text
            else:
                assert value == b"pending-1" and marks[offset] == "open" and offset == lso
        # the dropped-3 transaction ended after the open one began: aborted, above the LSO
        assert max(o for o, v in uncommitted.items() if v == b"dropped-3") > lso
        screenshot(browser, "transactions-messages")

        browser.get(f"{base}/topics/{topic}/0")
        assert int(browser.find_element("id", "high-watermark").text) == log_end
        assert int(browser.find_element("id", "lso-lag").text) == log_end - lso
        [row] = browser.find_elements("css selector", "tr.open-txn")
        assert int(row.get_attribute("data-first-offset")) == lso
        assert txids["open"] in row.text and "Ongoing" in row.text
        screenshot(browser, "transactions-partition")

        browser.get(f"{base}/transactions")
        states = {
            r.get_attribute("data-transactional-id"): r.get_attribute("data-state")
            for r in browser.find_elements("css selector", "tr.txn")
        }
        assert states == {
            txids["ok"]: "CompleteCommit",
            txids["no"]: "CompleteAbort",
            txids["open"]: "Ongoing",
        }
        assert browser.find_element("id", "committed").text == "2"
        assert browser.find_element("id", "aborted").text == "2"
        open_row = browser.find_element(
            "css selector", f'tr[data-transactional-id="{txids["open"]}"]'
        )
        assert f"{topic}-0" in open_row.text
        screenshot(browser, "transactions")
        still_open.commit_transaction(WAIT_S)
    finally:
        for producer in (ok, no, still_open):
            producer.flush(WAIT_S)


def shown_configs(browser) -> dict[str, tuple[str, str]]:
    """The Broker page's configuration table: name -> (value, source)."""
    return {
        row.get_attribute("data-name"): (
            row.find_elements("css selector", "td")[1].text,
            row.get_attribute("data-source"),
        )
        for row in browser.find_elements("css selector", "#configs tbody tr")
    }


def test_broker_page_shows_dynamic_changes_and_no_secret(broker_factory, browser):
    key_password = f"key-pw-{uuid.uuid4().hex}"
    jaas_password = f"jaas-pw-{uuid.uuid4().hex}"
    broker = broker_factory(
        {
            "metrics.listener": "http://127.0.0.1:0",
            "log.retention.ms": "3600000",
            "ssl.key.password": key_password,
            "listener.name.plaintext.plain.sasl.jaas.config": (
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'user_alice="{jaas_password}";'
            ),
        }
    )
    page_url = console_url(broker) + "/broker"
    browser.get(page_url)
    assert broker.log_dir in browser.find_element("id", "log-dirs").text
    shown = shown_configs(browser)
    assert shown["log.retention.ms"] == ("3600000", "STATIC_BROKER_CONFIG")
    assert shown["metrics.listener"] == ("http://127.0.0.1:0", "STATIC_BROKER_CONFIG")
    assert shown["console.read.only"] == ("true", "DEFAULT_CONFIG")
    assert shown["ssl.key.password"] == ("******", "STATIC_BROKER_CONFIG")

    # While it runs: this broker's own value with confluent-kafka's admin client, a cluster-wide
    # default with `chronolog configs` (librdkafka has no name for the cluster-wide resource).
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    own = ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
    [altered] = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.BROKER, "0", incremental_configs=[own])]
    ).values()
    altered.result(WAIT_S)
    assert (
        chronolog(
            [
                "configs",
                "--bootstrap-server",
                broker.bootstrap,
                "alter",
                "--entity-type",
                "brokers",
                "--entity-default",
                "--add-config",
                "message.max.bytes=2000000",
            ]
        )
        == 0
    )
    browser.refresh()
    shown = shown_configs(browser)
    assert shown["log.retention.ms"] == ("7200000", "DYNAMIC_BROKER_CONFIG")
    assert shown["message.max.bytes"] == ("2000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    # the page agrees with what the admin client reads through DescribeConfigs
    [described] = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    for name, entry in described.result(WAIT_S).items():
        if not entry.is_sensitive:
            assert shown[name] == (entry.value or "", ConfigSource(entry.source).name), name
    assert described.result(WAIT_S)["ssl.key.password"].is_sensitive
    screenshot(browser, "broker")

    served = urllib.request.urlopen(page_url, timeout=10).read().decode()
    for secret in (key_password, jaas_password):
        assert secret not in browser.page_source and secret not in served


def _status(url: str, data: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(url, data=data, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_read_only_refuses_deletes_and_bad_requests_do_not_hurt(broker_factory):
    broker = broker_factory({"metrics.listener": "http://127.0.0.1:0"})
    topic = f"console-keep-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic)
    base = console_url(broker)
    assert _status(base + "/nope") == 404
    assert _status(base + "/topics/no-such-topic/0") == 404
    form = urllib.parse.urlencode({"confirm": topic}).encode()
    assert _status(f"{base}/topics/{topic}/delete", form) == 403
    host, port = urllib.parse.urlsplit(base).netloc.split(":")
    for raw in (b"garbage\r\n\r\n", b"GET / HTTP/1.1\r\nno colon\r\n\r\n", b"\xff" * 20000):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            answer = sock.recv(100)
            assert answer == b"" or answer.startswith(b"HTTP/1.1 4"), answer
    assert _status(base + "/") == 200
    assert topic in urllib.request.urlopen(base + "/", timeout=10).read().decode()
    # the HTTP server's own lines are the broker's JSON lines too
    for line in broker.log_output(since_start=True).splitlines():
        assert isinstance(json.loads(line), dict), line


def test_delete_topic_when_not_read_only(broker_factory):
    broker = broker_factory(
        {"metrics.listener": "http://127.0.0.1:0", "console.read.only": "false"}
    )
    topic = f"console-gone-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic)
    base = console_url(broker)
    wrong = urllib.parse.urlencode({"confirm": "something else"}).encode()
    assert _status(f"{base}/topics/{topic}/delete", wrong) == 400
    right = urllib.parse.urlencode({"confirm": topic}).encode()
    assert _status(f"{base}/topics/{topic}/delete", right) == 200  # redirected to the topics
    assert topic not in urllib.request.urlopen(base + "/", timeout=10).read().decode()
    assert not os.path.exists(os.path.join(broker.log_dir, f"{topic}-0"))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, request_timeout_ms=WAIT_S * 1000)
    try:
        assert topic not in consumer.topics()
    finally:
        consumer.close()


def test_reset_group_offsets_to_a_time_when_not_read_only(broker_factory):
    broker = broker_factory(
        {"metrics.listener": "http://127.0.0.1:0", "console.read.only": "false"}
    )
    topic = f"console-reset-{uuid.uuid4().hex[:6]}"
    group = f"console-reset-group-{uuid.uuid4().hex[:6]}"
    create_topic(broker, topic, 1, **{"segment.bytes": str(SEGMENT_BYTES)})
    stamps = produce_out_of_order(broker, topic)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    base = console_url(broker)
    target = BASE_MS + 21_000
    form = {"topic": topic, "to": "time", "value": str(target), "confirm": group}
    assert _status(f"{base}/groups/{group}/reset", urllib.parse.urlencode(form).encode()) == 200
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [got] = checker.committed([TopicPartition(topic, 0)], timeout=WAIT_S)
    finally:
        checker.close()
    assert got.offset == min(i for i, ts in enumerate(stamps) if ts >= target)
    form.update(to="offset", value="7")
    assert _status(f"{base}/groups/{group}/reset", urllib.parse.urlencode(form).encode()) == 200
    page = urllib.request.urlopen(f"{base}/groups/{group}", timeout=10).read().decode()
    assert '<td class="num">7</td>' in page and f'<td class="num lag">{40 - 7}</td>' in page
