"""Cluster fixtures: a ZooKeeper server (Debian's zookeeper 3.8, Makefile target ``zookeeper``)
and brokers in a cluster, all real processes on 127.0.0.1.

- ``zookeeper`` (session, tests/conftest.py): one ZooKeeper server; each cluster uses its own
  chroot in it, so tests do not see each other's clusters.
- ``zookeeper_factory()`` (function): a ZooKeeper server of the test's own (to stop it).
- ``cluster_factory(size=3, zk=None, start=True, per_broker=None, **overrides)`` (function):
  ``size`` brokers (ids 1..size) joined through a new chroot; stopped at teardown. Keyword names
  use ``_`` for ``.``; ``per_broker`` maps a broker id to properties of its own. With
  CHRONOLOG_CLUSTER_LOGS=DIR every broker's log is copied to DIR/<test name>/ at teardown.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.cluster.helpers import ClusterProcesses
from tests.zookeeper import ZooKeeperServer


@pytest.fixture
def zookeeper_factory(tmp_path):
    started: list[ZooKeeperServer] = []

    def make() -> ZooKeeperServer:
        server = ZooKeeperServer(Path(tempfile.mkdtemp(prefix="zk-", dir=tmp_path))).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def cluster_factory(zookeeper, tmp_path, request):
    if os.environ.get("CHRONOLOG_BOOTSTRAP"):
        pytest.skip("starts its own brokers (CHRONOLOG_BOOTSTRAP is set)")
    made: list[ClusterProcesses] = []

    def make(
        size: int = 3,
        zk: ZooKeeperServer | None = None,
        start: bool = True,
        per_broker: dict[int, dict] | None = None,
        **kw,
    ):
        props = {k.replace("_", "."): v for k, v in kw.items()}
        cluster = ClusterProcesses.create(zk or zookeeper, tmp_path, size, props, per_broker)
        made.append(cluster)
        if start:
            cluster.start()
        return cluster

    yield make
    for cluster in made:
        cluster.stop()
    keep = os.environ.get("CHRONOLOG_CLUSTER_LOGS")
    if keep:  # a directory to copy every broker's log to, for a person reading a failure
        for cluster in made:
            for broker in cluster.brokers:
                target = Path(keep) / request.node.name
                target.mkdir(parents=True, exist_ok=True)
                name = f"broker{broker.overrides['broker.id']}.log"
                (target / name).write_text(broker.log_output())
