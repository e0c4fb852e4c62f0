"""What a request costs against its client's quotas, and the throttle time its answer carries
(Kafka's KafkaApis and RequestHandlerHelper around ClientQuotaManager; KIP-219).

- Produce: the request's size against producer_byte_rate; request time against
  request_percentage unless acks=0.
- Fetch from a consumer: the answer's record bytes against consumer_byte_rate; request time
  against request_percentage. A replica's fetch (a cluster's follower) is exempt, as Kafka's is.
  Departure: Kafka answers a throttled fetch empty and takes the bytes back; chronolog sends
  what was read (the fetch session has already moved on) and mutes the connection for the time
  that brings the rate back to the quota, so the rate over the window holds all the same.
- Every other request: request time against request_percentage; the inter-broker apis are
  exempt.

Request time is the time the event loop spent running the request's handler (its task steps,
measured by :class:`StepClock`, a trio instrument installed only once a request_percentage
quota exists), as a percentage of one second per second: Kafka's request-handler and network
thread time. Work a handler hands to worker threads (fsync, disk reads) is not counted.

The larger throttle wins; the answer carries it in ``throttle_time_ms`` and the server stops
reading the connection for that long after sending it (Kafka mutes the channel).
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

import trio

from broker.quotas.manager import QuotaKind, user_of
from protocol import CLUSTER_VERSIONS, ApiKey, FileRegion, Request

if TYPE_CHECKING:
    from broker.quotas import ClientQuotas

__all__ = ["StepClock", "Throttler", "record_request", "response_record_bytes"]

_EXEMPT = frozenset(CLUSTER_VERSIONS) - {
    ApiKey.ELECT_LEADERS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
}


class StepClock(trio.abc.Instrument):
    """Seconds the event loop spent running each task being watched (``watch``/``spent``)."""

    def __init__(self) -> None:
        self.watched: dict[trio.lowlevel.Task, float] = {}
        self._started = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self.watched:
            self._started = perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        spent = self.watched.get(task)
        if spent is not None:
            self.watched[task] = spent + perf_counter() - self._started

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self.watched.pop(task, None)  # a connection that ended inside a handler

    def watch(self) -> None:
        """Start counting the current task's steps, from this moment of the running one."""
        self.watched[trio.lowlevel.current_task()] = 0.0
        self._started = perf_counter()

    def spent(self) -> float | None:
        """Stop counting the current task: the seconds its steps took since ``watch``, the
        running one up to this moment (None: it was not watched)."""
        total = self.watched.pop(trio.lowlevel.current_task(), None)
        return None if total is None else total + perf_counter() - self._started


def response_record_bytes(body: Any) -> int:
    """The record bytes of a Fetch answer (what consumer_byte_rate counts)."""
    total = 0
    for topic in body.get("responses", ()):
        for partition in topic.get("partitions", ()):
            records = partition.get("records")
            if records is None:
                continue
            total += records.length if isinstance(records, FileRegion) else len(records)
    return total


def record_request(
    quotas: ClientQuotas,
    principal: str,
    request: Request,
    body: Any,
    request_size: int,
    handler_s: float | None,
    now_ms: int,
) -> int:
    """Record what ``request`` (answered with ``body``) cost its client and return the throttle
    time in ms (0: within every quota); counts the throttle in the winning quota's metrics."""
    header = request.header
    api = header.api_key
    if api in _EXEMPT:
        return 0
    user, client = user_of(principal), header.client_id or ""
    request_pct = None if handler_s is None else handler_s * 100.0
    bandwidth = 0
    kind = QuotaKind.REQUEST
    if api == ApiKey.PRODUCE:
        bandwidth = quotas.produce.record(user, client, request_size, now_ms)
        kind = QuotaKind.PRODUCE
        if request.body.acks == 0:
            request_pct = None
    elif api == ApiKey.FETCH:
        if _from_replica(request.body):
            return 0
        bandwidth = quotas.fetch.record(user, client, response_record_bytes(body), now_ms)
        kind = QuotaKind.FETCH
    requested = 0
    if request_pct is not None:
        requested = quotas.request.record(user, client, request_pct, now_ms)
    throttle = max(bandwidth, requested)
    if throttle > 0:
        winner = kind if bandwidth > requested else QuotaKind.REQUEST
        quotas.managers[winner].throttled(user, client, throttle, now_ms)
    return throttle


def _from_replica(body: Any) -> bool:
    state = body.get("replica_state")
    replica: int = state.get("replica_id", -1) if state else -1
    own: int = body.get("replica_id", -1)
    return max(own, replica) >= 0


class Throttler:
    """The server's hook (broker/server.py): ``begin`` before a request's handler runs,
    ``finish`` once it answered; ``finish`` records the cost, writes ``throttle_time_ms`` into
    the answer and returns the time to mute the connection for (ms)."""

    def __init__(self, quotas: ClientQuotas, clock: Any) -> None:
        self.quotas = quotas
        self.clock = clock  # wall-clock ms
        self.steps: StepClock | None = None

    def begin(self) -> bool:
        """Whether quotas apply to this request; starts counting its loop time if a
        request_percentage quota exists."""
        quotas = self.quotas
        if not quotas.enabled:
            return False
        if quotas.request.enabled:
            if self.steps is None:
                self.steps = StepClock()
                trio.lowlevel.add_instrument(self.steps)
            self.steps.watch()
        return True

    def finish(self, principal: str, request: Request, body: Any, request_size: int) -> int:
        """``request_size``: the request's bytes without the size prefix (a Produce's cost)."""
        handler_s = self.steps.spent() if self.steps is not None else None
        throttle = record_request(
            self.quotas, principal, request, body, request_size, handler_s, self.clock()
        )
        if throttle and body is not None and "throttle_time_ms" in body:
            body["throttle_time_ms"] = throttle
        return throttle
