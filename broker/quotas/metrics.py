"""Prometheus families of the client quotas, per quota entity, named as the JMX exporter shows
Kafka's (``kafka.server:type=Produce,user=U,client-id=C`` byte-rate and throttle-time ->
``kafka_server_produce_byte_rate{user,client_id}``): the measured rate, the bound that applies
(chronolog's own, ``..._quota``), and the throttle time handed out (a counter of ms and of
throttles, where Kafka keeps an average). Labels are the entity's metric tags: "" for a level
its quota does not name. Read at scrape time (broker/metrics.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from broker.quotas.manager import QuotaKind, desanitize

if TYPE_CHECKING:
    from broker.quotas import ClientQuotas

_RATE_NAMES = {
    QuotaKind.PRODUCE: ("byte_rate", "Bytes per second produced"),
    QuotaKind.FETCH: ("byte_rate", "Bytes per second fetched"),
    QuotaKind.REQUEST: ("request_time", "Percent of one second per second spent on requests"),
}


def quota_metrics(quotas: ClientQuotas, now_ms: int) -> Iterator[Metric]:
    """Every quota manager's families; nothing for a type no quota was ever set for."""
    labels = ["user", "client_id"]
    for kind, manager in quotas.managers.items():
        if not manager.enabled:
            continue
        prefix = f"kafka_server_{kind.group.lower()}"
        name, doc = _RATE_NAMES[kind]
        rate = GaugeMetricFamily(
            f"{prefix}_{name}", f"{doc} by the clients of a quota entity", labels=labels
        )
        bound = GaugeMetricFamily(
            f"{prefix}_quota",
            f"The {kind.config_key} that applies to a quota entity's clients (absent: none)",
            labels=labels,
        )
        throttle_ms = CounterMetricFamily(
            f"{prefix}_throttle_time_ms",
            "Throttle time handed out to a quota entity's clients, in ms",
            labels=labels,
        )
        throttles = CounterMetricFamily(
            f"{prefix}_throttles",
            "Answers that carried a throttle time to a quota entity's clients",
            labels=labels,
        )
        for (user, client), sensor in list(manager.sensors.items()):
            tags = [desanitize(user), client]
            rate.add_metric(tags, sensor.rate.measure(now_ms))
            if sensor.bound is not None:
                bound.add_metric(tags, sensor.bound)
            throttle_ms.add_metric(tags, sensor.throttle_ms_total)
            throttles.add_metric(tags, sensor.throttles)
        yield from (rate, bound, throttle_ms, throttles)
