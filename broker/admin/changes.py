"""The changes admin requests make to a running broker: topic config overrides, the dynamic
broker configs, partitions added to a topic.

Each change is judged completely before anything is written (ConfigError, naming the key; and
the ``*Error`` classes below), then persisted (the topic registry or the dynamic config file,
atomically; in a cluster ZooKeeper, with a change notification for the other brokers) and only
then applied to the running logs, each under its partition lock, so later appends, rolls,
flushes and retention passes use it without a restart. A failed write (a full disk, ZooKeeper
unreachable) leaves the broker as it was and propagates the OSError or
broker.errors.ClusterStateError. Changes are serialised by the context's admin lock, which topic
creation and deletion take too.

In a cluster, :func:`adopt_topic_overrides` and :func:`adopt_dynamic_broker_configs` apply what
another broker wrote to ZooKeeper (broker/cluster/config_changes.py follows the notifications).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import structlog

from broker import workers
from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.topics import Topic

logger = structlog.get_logger(__name__)


# Reads an entity's configs from ZooKeeper: None when they are unreadable (logged).
StoredConfigs = Callable[[], Awaitable[Mapping[str, str] | None]]


class UnknownTopicError(Exception):
    """Raised when a change names a topic that does not exist."""


class PartitionCountError(Exception):
    """Raised by :func:`add_partitions` when the count asked for does not increase the topic's
    (Kafka's INVALID_PARTITIONS); ``str(exc)`` is Kafka's message."""


async def put_and_save(ctx: BrokerContext, new: Topic, old: Topic) -> None:
    """Put ``new`` in the topic registry and save the registry file; if the save fails (it
    raises), ``old`` is put back so the running broker matches the file."""
    ctx.topics.put(new)
    try:
        await workers.run_sync(ctx.topics.save, ctx.topics.snapshot())
    except BaseException:
        ctx.topics.put(old)
        raise


async def apply_topic_settings(ctx: BrokerContext, topics: list[Topic]) -> None:
    """Give every partition log of ``topics`` its topic's current settings."""
    for topic in topics:
        for p in range(topic.partitions):
            async with ctx.locked_log(topic.name, p) as log:
                if log is not None:
                    log.update_config(topic.log_config)


async def set_topic_overrides(
    ctx: BrokerContext, name: str, overrides: Mapping[str, str], *, validate_only: bool
) -> Topic:
    """Make ``overrides`` the topic's whole set of config overrides; returns the topic as it
    is (or would be, with ``validate_only``). Raises UnknownTopicError, ConfigError."""
    async with ctx.admin_lock:
        old = ctx.topics.get(name)
        if old is None:
            raise UnknownTopicError(f"The topic '{name}' does not exist.")
        new = ctx.topics.make_topic(name, old.partitions, overrides, topic_id=old.topic_id)
        if validate_only:
            return new
        await ctx.replication.save_topic(new, old)
        await apply_topic_settings(ctx, [new])
    logger.info(
        "topic configs changed",
        topic=name,
        configs=dict(new.overrides),
        before=dict(old.overrides),
    )
    return new


async def adopt_topic_overrides(ctx: BrokerContext, name: str, read: StoredConfigs) -> None:
    """In a cluster: make the overrides ``read`` from ZooKeeper the topic's overrides here and
    apply them to its running logs (a topic this broker does not know is left alone: it reads
    the configs when it learns of the topic). Read under the admin lock, so a change this
    broker is making meanwhile is never overwritten by what ZooKeeper held before it. Raises
    ConfigError."""
    async with ctx.admin_lock:
        old = ctx.topics.get(name)
        if old is None:
            return
        overrides = await read()
        if overrides is None:
            return
        new = ctx.topics.make_topic(name, old.partitions, overrides, topic_id=old.topic_id)
        ctx.topics.put(new)
        # Applied even when the registry already had them: an UpdateMetadata may have read
        # the topic again from ZooKeeper without touching the logs.
        await apply_topic_settings(ctx, [new])
    if dict(new.overrides) != dict(old.overrides):
        logger.info(
            "topic configs changed in the cluster",
            topic=name,
            configs=dict(new.overrides),
            before=dict(old.overrides),
        )


async def set_dynamic_broker_configs(
    ctx: BrokerContext, values: Mapping[str, str], *, per_broker: bool, validate_only: bool
) -> None:
    """Make ``values`` the whole dynamic layer named (this broker's own, or the cluster-wide
    defaults), persist it and apply it: the broker's config and every topic's effective config
    follow. Raises broker.admin.dynamic.NotDynamicError, ConfigError."""
    async with ctx.admin_lock:
        dynamic = ctx.dynamic_configs
        layer = dynamic.validate(values, per_broker=per_broker)
        cluster_default = dynamic.cluster_default if per_broker else layer
        own = layer if per_broker else dynamic.per_broker
        config = dynamic.effective(ctx.config, cluster_default, own)
        topics = ctx.topics.rebuilt(config)
        if validate_only:
            return
        await ctx.replication.save_broker_configs(
            layer, per_broker=per_broker, cluster_default=cluster_default, own=own
        )
        before = dict(dynamic.per_broker if per_broker else dynamic.cluster_default)
        changed = await _use_layers(ctx, cluster_default, own, config, topics)
    logger.info(
        "dynamic broker configs changed",
        level=f"broker {ctx.config.broker_id}" if per_broker else "cluster-wide default",
        configs=layer,
        before=before,
        topics_changed=len(changed),
    )


async def adopt_dynamic_broker_configs(
    ctx: BrokerContext, read: StoredConfigs, *, per_broker: bool
) -> None:
    """In a cluster: make the layer ``read`` from ZooKeeper (this broker's own with
    ``per_broker``, else the cluster-wide defaults) this broker's, as
    :func:`set_dynamic_broker_configs` does after persisting; read under the admin lock, as
    :func:`adopt_topic_overrides` reads. Entries that do not validate are left out (logged).
    Raises ConfigError when the layers do not combine."""
    async with ctx.admin_lock:
        layer = await read()
        if layer is None:
            return
        dynamic = ctx.dynamic_configs
        if per_broker:
            default, own = dynamic.cluster_default, dynamic.usable(layer, per_broker=True)
        else:
            default, own = dynamic.usable(layer, per_broker=False), dynamic.per_broker
        if (default, own) == (dynamic.cluster_default, dynamic.per_broker):
            return
        config = dynamic.effective(ctx.config, default, own)
        topics = ctx.topics.rebuilt(config)
        before = (dict(dynamic.cluster_default), dict(dynamic.per_broker))
        changed = await _use_layers(ctx, default, own, config, topics)
    logger.info(
        "dynamic broker configs changed in the cluster",
        cluster_default=default,
        broker=own,
        before_cluster_default=before[0],
        before_broker=before[1],
        topics_changed=len(changed),
    )


async def _use_layers(
    ctx: BrokerContext,
    cluster_default: Mapping[str, str],
    own: Mapping[str, str],
    config: BrokerConfig,
    topics: Mapping[str, Topic],
) -> list[Topic]:
    """Adopt persisted dynamic layers: the broker's config, every topic re-resolved, the logs
    of those whose effective config changed updated (returned). Under the admin lock."""
    ctx.dynamic_configs.replace(cluster_default, own)
    changed = [
        t for t in topics.values() if (old := ctx.topics.get(t.name)) and old.config != t.config
    ]
    ctx.config = config
    ctx.topics.use_config(config, topics)
    await apply_topic_settings(ctx, changed)
    return changed


async def add_partitions(
    ctx: BrokerContext, name: str, count: int, *, validate_only: bool
) -> Topic:
    """Grow the topic to ``count`` partitions: the registry first (a crash before the logs
    exist is repaired at the next start, which creates missing logs), then the new logs.
    Raises UnknownTopicError, PartitionCountError."""
    async with ctx.admin_lock:
        old = ctx.topics.get(name)
        if old is None:
            raise UnknownTopicError(f"The topic '{name}' does not exist.")
        if count < old.partitions:
            raise PartitionCountError(
                f"Topic currently has {old.partitions} partitions, which is higher than the "
                f"requested {count}."
            )
        if count == old.partitions:
            raise PartitionCountError(f"Topic already has {old.partitions} partitions.")
        new = Topic(name, count, old.overrides, old.config, old.topic_id)
        if validate_only:
            return new
        await put_and_save(ctx, new, old)
        for p in range(old.partitions, count):
            async with ctx.partition(name, p).lock:
                log = await workers.run_sync(ctx.log_manager.create_log, name, p, new.log_config)
                await workers.run_sync(log.assign_topic_id, new.topic_id)
    logger.info("added partitions", topic=name, partitions=count, before=old.partitions)
    return new
