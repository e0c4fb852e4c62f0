"""The cluster's identity on disk: ``meta.properties`` in every log dir (broker.id, cluster.id),
as Kafka writes it. Written atomically (storage.durable.write_atomically)."""

from __future__ import annotations

import base64
import os
import uuid

import structlog

from broker.config import BrokerConfig, parse_properties
from broker.errors import StartupError
from storage.durable import write_atomically

logger = structlog.get_logger(__name__)

META_FILE = "meta.properties"


def load_or_create_meta(config: BrokerConfig, cluster_id_in_zk: str | None = None) -> str:
    """Return the cluster id, generating and persisting it in every log dir on first start (a
    broker in a cluster takes ZooKeeper's, ``cluster_id_in_zk``).

    Raises StartupError when a log dir's meta.properties names another broker.id, the log dirs
    disagree on the cluster id, or they name another cluster than ZooKeeper's.
    """
    cluster_ids = set()
    for log_dir in config.log_dirs:
        os.makedirs(log_dir, exist_ok=True)
        path = os.path.join(log_dir, META_FILE)
        try:
            with open(path, encoding="utf-8") as f:
                props = dict(parse_properties(f.read()))
        except FileNotFoundError:
            continue
        if props.get("broker.id") not in (None, str(config.broker_id)):
            raise StartupError(
                f"{path} belongs to broker.id {props['broker.id']}, but this broker is configured "
                f"with broker.id {config.broker_id}; fix broker.id or use another log dir"
            )
        if props.get("cluster.id"):
            cluster_ids.add(props["cluster.id"])
    if len(cluster_ids) > 1:
        raise StartupError(
            f"log dirs {', '.join(config.log_dirs)} belong to different clusters "
            f"({', '.join(sorted(cluster_ids))})"
        )
    if cluster_id_in_zk is not None:
        if cluster_ids and cluster_ids != {cluster_id_in_zk}:
            raise StartupError(
                f"log dirs {', '.join(config.log_dirs)} belong to cluster "
                f"{cluster_ids.pop()}, but ZooKeeper ({config.zookeeper_connect}) holds cluster "
                f"{cluster_id_in_zk}; point zookeeper.connect at that cluster's ZooKeeper, or "
                "use empty log dirs"
            )
        cluster_id = cluster_id_in_zk
    elif cluster_ids:
        cluster_id = cluster_ids.pop()
    else:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        logger.info("generated cluster id", cluster_id=cluster_id)
    text = f"version=0\nbroker.id={config.broker_id}\ncluster.id={cluster_id}\n".encode()
    for log_dir in config.log_dirs:
        path = os.path.join(log_dir, META_FILE)
        try:
            with open(path, "rb") as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        write_atomically(path, text)
    return cluster_id
