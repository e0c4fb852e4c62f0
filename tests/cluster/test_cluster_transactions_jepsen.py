"""A Jepsen-style check of transactions on a 3-broker cluster (issue #32): the single broker's
workload (tests/integration/test_transactions_librdkafka.py :func:`random_transactions`: three
transactional producers committing and aborting at random over three partitions at replication
factor 3) while the leader of a data partition and then the coordinator's leader of one of the
transactional ids are killed with SIGKILL and restarted. A read_committed reader then sees
every committed record exactly once and in order, nothing aborted, and an unknown outcome all or
nothing (:func:`check_promises`); every broker's copy passes dump-log --verify, .txnindex files
included, and Kafka 4.1.1's DumpLogSegments reads every batch of it as valid. About a minute
on a quiet machine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.oracle.kafka_oracle import DUMP_LOG_SEGMENTS, run_kafka_tool
from tests.waiting import wait_for
from tests.cluster.test_cluster_transactions import SETTINGS, _coordinator_of
from tests.integration.clients import dump_log_verify, topic_name
from tests.integration.test_transactions_librdkafka import check_promises, random_transactions


BATCH = re.compile(r"^baseOffset: \d+ lastOffset: \d+ .*isvalid: (\w+)")


@pytest.mark.kafka_oracle
def test_random_transactions_across_leader_kills_keep_every_promise(cluster_factory):
    cluster = cluster_factory(**SETTINGS)
    topic = topic_name("jepsen")
    assert cluster.create_topic(topic, 3, configs={"min.insync.replicas": "2"}) == 0
    bootstrap = cluster.bootstrap  # every broker: the clients find the others after a kill

    def kill_and_restart(victim_of):
        def fault() -> None:
            victim = wait_for(victim_of, "a broker to kill", timeout=60)
            broker = cluster.broker(victim)
            broker.kill()
            broker.start()

        return fault

    def data_leader() -> int:
        leader = cluster.leader(topic, 0)
        return leader if leader > 0 else 0

    outcomes = random_transactions(
        bootstrap,
        topic,
        {
            8: kill_and_restart(data_leader),
            18: kill_and_restart(lambda: _coordinator_of(cluster, f"{topic}-p1")),
        },
    )
    check_promises(bootstrap, topic, outcomes)
    cluster.stop()
    for broker in cluster.brokers:
        dump_log_verify(broker.log_dir, topic, (".log", ".index", ".timeindex", ".txnindex"))
        logs = sorted(str(f) for f in Path(broker.log_dir).glob(f"{topic}-*/*.log"))
        out = run_kafka_tool(DUMP_LOG_SEGMENTS, "--deep-iteration", "--files", ",".join(logs))
        verdicts = [m[1] for line in out.stdout.splitlines() if (m := BATCH.match(line))]
        assert verdicts and set(verdicts) == {"true"}, out.stdout[-2000:]
