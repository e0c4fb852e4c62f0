"""Client quotas without a broker (broker/quotas/): the windowed rate and throttle times against
Kafka's own unit tests' figures (ClientQuotaManagerTest, ClientRequestQuotaManagerTest), the
precedence of Kafka's testQuotaConfigPrecedence, names sanitized as Java's URLEncoder does,
AlterClientQuotas' checks and DescribeClientQuotas' filters as ZkAdminManager answers them, the
quota file, and the loop time a request is charged."""

from __future__ import annotations

import json
import time

import pytest
import trio

from broker.config import BrokerConfig
from broker.errors import StartupError
from broker.quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    ClientQuotas,
    Op,
    QuotaRequestError,
    entity_parts,
)
from broker.quotas.manager import DEFAULT, ClientQuotaManager, QuotaKind, sanitize, user_of
from broker.quotas.rate import Rate
from broker.quotas.store import QUOTA_FILE, FileQuotaStore
from broker.quotas.throttle import StepClock
from broker.security.acls import AclBinding, AclFile, Operation, PatternType, Permission
from broker.security.acls import ResourceType
from broker.security.authorizer import Authorizer
from broker.security.rules import RULES, Check
from broker.security.session import Session
from broker.security.settings import Listener, SecuritySettings
from protocol import ApiKey, ClientConnection, ServerConnection
from protocol.errors import ErrorCode

START_MS = 1_700_000_000_000


def test_byte_rate_throttle_is_kafkas():
    """ClientQuotaManagerTest.testQuotaViolation: 500 B/s, ten seconds of 400 B, then 2300 B
    half a second later: 6300 B over 10.5 s is 600 B/s, so (600 - 500) / 500 * 10.5 s."""
    manager = ClientQuotaManager(QuotaKind.PRODUCE)
    manager.update((None, DEFAULT), 500)
    now = START_MS
    for _ in range(10):
        assert manager.record("ANONYMOUS", "unknown", 400, now) == 0
        now += 1000
    now += 500
    assert manager.record("ANONYMOUS", "unknown", 2300, now) == 2100
    now += 2100
    for _ in range(10):
        manager.record("ANONYMOUS", "unknown", 400, now)
        now += 1000
    assert manager.record("ANONYMOUS", "unknown", 0, now) == 0  # the burst rolled over


def test_request_percentage_throttle_is_kafkas_and_capped_at_one_window():
    """ClientRequestQuotaManagerTest.testRequestPercentageQuotaViolation: 1 %, 4 ms a second,
    then 67.1 ms: 210 ms; a 500 ms burst asks for more than a window and gets 1000 ms."""
    manager = ClientQuotaManager(QuotaKind.REQUEST)
    manager.update((sanitize("ANONYMOUS"), "test-client"), 1)

    def pct(ms: float) -> float:
        return ms / 10  # ms of a second, as a percentage

    now = START_MS
    for _ in range(10):
        assert manager.record("ANONYMOUS", "test-client", pct(4), now) == 0
        now += 1000
    now += 500
    assert manager.record("ANONYMOUS", "test-client", pct(67.1), now) == 210
    now += 210
    for _ in range(11):
        manager.record("ANONYMOUS", "test-client", pct(4), now)
        now += 1000
    assert manager.record("ANONYMOUS", "test-client", 0, now) == 0
    assert manager.record("ANONYMOUS", "test-client", pct(500), now) == 1000
    for _ in range(10):
        now += 1000
        assert manager.record("ANONYMOUS", "test-client", 0, now) == 1000


def test_rate_counts_at_least_ten_windows_and_forgets_old_samples():
    rate = Rate(11, 1000)
    rate.record(1000, START_MS)
    assert rate.measure(START_MS) == pytest.approx(100.0)  # over 10 windows, not 1 ms
    assert rate.measure(START_MS + 5000) == pytest.approx(100.0)
    assert rate.measure(START_MS + 10500) == pytest.approx(1000 / 10.5)  # past ten windows
    assert rate.measure(START_MS + 11000) == 0.0  # 11 windows after the last value: gone


def test_precedence_is_kafkas():
    """ClientQuotaManagerTest.testQuotaConfigPrecedence, value for value: each check records
    11 x value at one instant (a rate of 1.1 x value over the ten-second window)."""
    m = ClientQuotaManager(QuotaKind.PRODUCE)
    m.update((DEFAULT, None), 1000)
    m.update((None, DEFAULT), 2000)
    m.update((DEFAULT, DEFAULT), 3000)
    m.update(("userA", None), 4000)
    m.update(("userA", "client1"), 5000)
    m.update(("userB", None), 6000)
    m.update(("userB", "client1"), 7000)
    m.update(("userB", DEFAULT), 8000)
    m.update(("userC", None), 10000)
    m.update((None, "client1"), 9000)

    def check(user: str, client: str, bound: float, value: int, throttled: bool) -> None:
        assert m.quota_for(user, client) == bound
        throttle = m.record(user, client, value * 11, START_MS)
        assert (throttle > 0) is throttled, (user, client, value, throttle)

    check("userA", "client1", 5000, 4500, False)
    check("userA", "client2", 4000, 4500, True)
    check("userA", "client3", 4000, 0, True)  # <user> is shared by its clients
    check("userA", "client1", 5000, 0, False)
    check("userB", "client1", 7000, 8000, True)
    check("userB", "client2", 8000, 7000, False)  # <user, default client> is per client
    check("userB", "client3", 8000, 7000, False)
    check("userD", "client1", 3000, 3500, True)
    check("userD", "client2", 3000, 2500, False)
    check("userE", "client1", 3000, 2500, False)
    m.update((DEFAULT, DEFAULT), None)
    check("userD", "client1", 1000, 0, False)
    check("userE", "client4", 1000, 1500, True)
    check("userF", "client4", 1000, 800, False)
    check("userF", "client5", 1000, 800, True)
    m.update((DEFAULT, None), None)
    check("userF", "client4", 2000, 0, False)
    check("userF", "client5", 2000, 0, False)
    check("userF", "client5", 2000, 2500, True)
    check("userG", "client5", 2000, 0, True)
    m.update(("userA", None), 8000)
    m.update(("userA", "client1"), 10000)
    check("userA", "client2", 8000, 0, False)
    check("userA", "client2", 8000, 4500, True)
    check("userA", "client1", 10000, 0, False)
    check("userA", "client1", 10000, 6000, True)
    m.update(("userA", "client1"), None)
    check("userA", "client6", 8000, 0, True)
    m.update(("userA", "client6"), 11000)
    check("userA", "client6", 11000, 8500, False)
    m.update(("userA", DEFAULT), 12000)
    m.update(("userA", "client6"), None)
    check("userA", "client6", 12000, 4000, True)


def test_no_quota_no_rate_kept():
    manager = ClientQuotaManager(QuotaKind.FETCH)
    assert manager.record("alice", "app", 10**9, START_MS) == 0
    assert not manager.sensors


@pytest.mark.parametrize(
    ("name", "sanitized"),
    [
        ("alice", "alice"),
        ("user@example.com", "user%40example.com"),
        ("a b", "a%20b"),
        ("a*b", "a%2Ab"),
        ("a~b", "a%7Eb"),
        ("CN=x,O=y", "CN%3Dx%2CO%3Dy"),
        ("é", "%C3%A9"),
        ("<default>", "%3Cdefault%3E"),
        ("a-b_c.d", "a-b_c.d"),
    ],
)
def test_names_are_sanitized_as_kafkas_sanitizer(name, sanitized):
    assert sanitize(name) == sanitized
    assert user_of(f"User:{name}") == sanitized


def quotas(tmp_path) -> ClientQuotas:
    config = BrokerConfig.from_properties([("log.dirs", str(tmp_path))])
    return ClientQuotas(config)


@pytest.mark.parametrize(
    ("parts", "ops", "message"),
    [
        ([], [], "Invalid empty client quota entity"),
        ([("group", "g")], [], "Unhandled client quota entity type: group"),
        ([("user", "")], [], "Empty user not supported"),
        ([("ip", "1.2.3.4"), ("user", "a")], [], "IP entity should not be used with"),
        ([("ip", "1.2.3.4")], [], "chronolog does not enforce IP connection-creation quotas"),
        ([("user", "a")], [Op("producer_bytes_rate", 1, False)], "Invalid configuration key"),
        ([("user", "a")], [Op("producer_byte_rate", 1.5, False)], "must be a LONG value"),
    ],
)
def test_alterations_kafka_refuses(tmp_path, parts, ops, message):
    with pytest.raises(QuotaRequestError, match=message) as caught:
        quotas(tmp_path).check_alteration(parts, ops)
    assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_alterations_store_values_as_kafka_writes_them(tmp_path):
    q = quotas(tmp_path)
    entity, config = q.check_alteration(
        [("user", "bob@x"), ("client-id", None)],
        [
            Op("producer_byte_rate", 1048576.0000001, False),
            Op("request_percentage", 1e7, False),
            Op("consumer_byte_rate", 0, True),
        ],
    )
    assert entity == ("bob%40x", DEFAULT)
    assert config == {"producer_byte_rate": "1048576", "request_percentage": "1.0E7"}
    assert entity_parts(entity) == [("user", "bob@x"), ("client-id", None)]


async def test_file_store_keeps_quotas_across_a_restart(tmp_path):
    q = quotas(tmp_path)
    changes = [
        q.check_alteration([("user", "alice")], [Op("producer_byte_rate", 1024, False)]),
        q.check_alteration([("client-id", None)], [Op("consumer_byte_rate", 2048, False)]),
        q.check_alteration(
            [("user", None), ("client-id", "app")], [Op("request_percentage", 12.5, False)]
        ),
    ]
    await q.save(changes)
    doc = json.loads((tmp_path / QUOTA_FILE).read_text())
    assert doc == {
        "version": 1,
        "entities": {
            "clients/<default>": {"consumer_byte_rate": "2048"},
            "users/<default>/clients/app": {"request_percentage": "12.5"},
            "users/alice": {"producer_byte_rate": "1024"},
        },
    }
    again = quotas(tmp_path)
    again.load_file()
    assert again.entities == q.entities
    assert again.produce.quota_for("alice", "any") == 1024
    assert again.fetch.quota_for("bob", "any") == 2048
    assert again.request.quota_for("carol", "app") == 12.5
    # removing the last config of an entity drops it from the file
    await again.save(
        [again.check_alteration([("user", "alice")], [Op("producer_byte_rate", 0, True)])]
    )
    assert "users/alice" not in json.loads((tmp_path / QUOTA_FILE).read_text())["entities"]
    assert again.produce.quota_for("alice", "any") is None


def test_an_unreadable_quota_file_stops_the_start(tmp_path):
    (tmp_path / QUOTA_FILE).write_text('{"version": 1, "entities": {"topics/t": {}}}')
    with pytest.raises(StartupError, match="client quota file .* is unreadable"):
        FileQuotaStore(str(tmp_path)).load()


@pytest.fixture
def described(tmp_path):
    q = quotas(tmp_path)
    for parts in (
        [("user", "alice")],
        [("user", None)],
        [("user", "alice"), ("client-id", "app")],
        [("user", None), ("client-id", None)],
        [("client-id", "app")],
        [("client-id", None)],
    ):
        q.adopt(*q.check_alteration(parts, [Op("producer_byte_rate", 100, False)]))

    def describe(components, strict=False):
        return [entity_parts(e) for e, _ in q.describe(components, strict)]

    return describe


def test_describe_filters_as_kafka(described):
    assert len(described([])) == 6
    assert described([], strict=True) == []
    assert described([("user", MATCH_EXACT, "alice")], strict=True) == [[("user", "alice")]]
    assert described([("user", MATCH_EXACT, "alice")]) == [
        [("user", "alice")],
        [("user", "alice"), ("client-id", "app")],
    ]
    assert described([("user", MATCH_DEFAULT, None)], strict=True) == [[("user", None)]]
    assert described([("user", MATCH_SPECIFIED, None), ("client-id", MATCH_SPECIFIED, None)]) == [
        [("user", None), ("client-id", None)],
        [("user", "alice"), ("client-id", "app")],
    ]
    assert described([("client-id", MATCH_EXACT, "app")], strict=True) == [[("client-id", "app")]]
    assert described([("ip", MATCH_SPECIFIED, None)]) == []


@pytest.mark.parametrize(
    ("components", "code", "message"),
    [
        ([("user", 2, None), ("user", 2, None)], 42, "Duplicate user filter component"),
        ([("", 2, None)], 42, "Unexpected empty filter component entity type"),
        ([("group", 2, None)], 35, "Custom entity type 'group' not supported"),
        ([("ip", 2, None), ("user", 2, None)], 42, "IP filter component should not be used"),
    ],
)
def test_describe_refuses_what_kafka_refuses(tmp_path, components, code, message):
    with pytest.raises(QuotaRequestError, match=message) as caught:
        quotas(tmp_path).describe(components, False)
    assert caught.value.code == code


async def test_step_clock_counts_loop_time_not_waiting():
    """A request is charged the time the loop ran its task: the busy part, not the sleep."""
    clock = StepClock()
    trio.lowlevel.add_instrument(clock)
    try:
        clock.watch()
        started = time.perf_counter()
        while time.perf_counter() - started < 0.02:
            pass
        await trio.sleep(1.0)
        spent = clock.spent()
    finally:
        trio.lowlevel.remove_instrument(clock)
    assert spent is not None and 0.02 <= spent < 1.0
    assert clock.spent() is None  # no longer watched


def test_the_quota_apis_need_cluster_describe_configs_and_alter_configs(tmp_path):
    """Kafka's KafkaApis: DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster (refused
    whole, entries null), AlterClientQuotas ALTER_CONFIGS (each entry refused, its entity
    echoed); ALTER_CONFIGS implies DESCRIBE_CONFIGS."""
    store = AclFile(str(tmp_path))
    store.add(
        [
            AclBinding(
                ResourceType.CLUSTER,
                "kafka-cluster",
                PatternType.LITERAL,
                "User:admin",
                "*",
                Operation.ALTER_CONFIGS,
                Permission.ALLOW,
            ).validate()
        ]
    )
    authorizer = Authorizer(store, SecuritySettings(authorizer="x"))
    listener = Listener("PLAINTEXT", "PLAINTEXT", "", 9092, "h", 9092)

    def request(api: ApiKey, body: dict):
        _, frame = ClientConnection("t").request(api, 1, body)
        (decoded,) = ServerConnection().receive_data(frame)
        return decoded

    describe = request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": [], "strict": False})
    entity = [{"entity_type": "user", "entity_name": "alice"}]
    alter = request(
        ApiKey.ALTER_CLIENT_QUOTAS,
        {"entries": [{"entity": entity, "ops": []}], "validate_only": False},
    )
    handled = []

    async def handler(ctx, req):
        handled.append(req.header.api_key)
        return {"throttle_time_ms": 0}

    async def run(principal: str, req):
        session = Session(gate=None, listener=listener, peer="127.0.0.1:1", host="127.0.0.1")
        session.principal = principal
        check = Check(authorizer, session, req.header.api_key)
        return await RULES[req.header.api_key](check, handler, None, req)

    refused = trio.run(run, "User:bob", describe)
    assert (refused["error_code"], refused["entries"]) == (31, None)
    (entry,) = trio.run(run, "User:bob", alter)["entries"]
    assert (entry["error_code"], entry["entity"]) == (31, entity)
    assert handled == []
    trio.run(run, "User:admin", describe)
    trio.run(run, "User:admin", alter)
    assert handled == [ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.ALTER_CLIENT_QUOTAS]


def test_a_request_costs_its_size_as_kafka_counts_it():
    """ServerConnection.request_size is the frame without its size prefix (Kafka's
    request.sizeInBytes), for each request of a pipelined run."""
    client, server = ClientConnection("producer"), ServerConnection()
    frames = [
        client.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False})[1],
        client.request(ApiKey.API_VERSIONS, 3, {})[1],
    ]
    sizes = [server.request_size for _ in server.receive_data(b"".join(frames))]
    assert sizes == [len(f) - 4 for f in frames]


async def test_step_clock_forgets_a_task_that_ends_while_watched():
    """A connection whose task ends inside a handler (peer gone) leaves nothing behind."""
    clock = StepClock()
    trio.lowlevel.add_instrument(clock)
    try:

        async def connection_that_ends_mid_request() -> None:
            clock.watch()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(connection_that_ends_mid_request)
    finally:
        trio.lowlevel.remove_instrument(clock)
    assert clock.watched == {}


def test_entries_for_one_entity_in_one_request_add_up(tmp_path):
    """Kafka applies a request's entries one after another: a second entry for the same
    entity starts from what the first set."""
    q = quotas(tmp_path)
    pending: dict = {}
    for ops in ([Op("producer_byte_rate", 10, False)], [Op("consumer_byte_rate", 20, False)]):
        entity, config = q.check_alteration([("user", "alice")], ops, pending)
        pending[entity] = config
    assert pending == {("alice", None): {"producer_byte_rate": "10", "consumer_byte_rate": "20"}}
