"""Producer ids of a cluster: blocks reserved in ZooKeeper, as Kafka's ZkProducerIdManager does.

Every broker hands out ids to idempotent producers; they must never collide between brokers, or
two producers would share one sequence space on a partition (a batch of one would be taken for
a retry of the other's and dropped while acknowledged). ``/latest_producer_id_block`` holds the
last block reserved, ``{"version":1,"broker":N,"block_start":"S","block_end":"E"}`` (E
inclusive); a broker reserves the next one with a conditional write (retrying when another broker
won the race) before handing out any id of it.
"""

from __future__ import annotations

import json

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from broker.cluster.zk import ZooKeeper
from broker.producer_ids import BLOCK_SIZE, ProducerIdManager

PATH = "/latest_producer_id_block"


class ZkProducerIdManager(ProducerIdManager):
    """ProducerIdManager whose blocks come from ZooKeeper; ``reserve_block`` blocks (a worker
    thread) and raises ConnectionError when ZooKeeper cannot be reached (nothing reserved)."""

    def __init__(self, zk: ZooKeeper, broker_id: int) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._next = 0
        self._end = 0

    def load(self) -> None:
        """Nothing local to load: the first InitProducerId reserves a block."""

    def reserve_block(self) -> None:
        client, path = self._zk.client, self._zk.path(PATH)
        try:
            while True:
                try:
                    data, stat = client.get(path)
                except NoNodeError:
                    start, version = 0, None
                else:
                    start, version = int(json.loads(data)["block_end"]) + 1, stat.version
                doc = json.dumps(
                    {
                        "version": 1,
                        "broker": self._broker_id,
                        "block_start": str(start),
                        "block_end": str(start + BLOCK_SIZE - 1),
                    }
                ).encode()
                try:
                    if version is None:
                        client.create(path, doc)
                    else:
                        client.set(path, doc, version=version)
                except (BadVersionError, NodeExistsError):
                    continue  # another broker reserved the block meanwhile
                self._next, self._end = start, start + BLOCK_SIZE
                return
        except (KazooException, ValueError, KeyError) as exc:
            raise ConnectionError(
                f"cannot reserve producer ids in ZooKeeper ({PATH}): {exc!r}"
            ) from exc
