"""What the controller handles, one event at a time (Kafka's ControllerEvent case classes).

Events come from ZooKeeper watches, this broker's config notifications and the controller
itself; they say what changed, not the new state (the controller reads that), and are retried
after a ZooKeeper error. Requests come from brokers (ControlledShutdown, ElectLeaders, reassignments) through
:meth:`broker.cluster.controller.Controller.call`, which answers them; they are never retried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Key = tuple[str, int]


@dataclass(frozen=True)
class BrokersChanged:
    """/brokers/ids changed: a broker registered, left, or registered again (a new epoch)."""


@dataclass(frozen=True)
class TopicsChanged:
    """/brokers/topics changed: topics were created or removed."""


@dataclass(frozen=True)
class PartitionsChanged:
    """A topic's assignment znode changed (CreatePartitions adds partitions)."""

    topic: str


@dataclass(frozen=True)
class ConfigsChanged:
    """A topic's configs (``topic``) or the dynamic broker configs (None) changed."""

    topic: str | None


@dataclass(frozen=True)
class IsrChangesReported:
    """Leaders queued ISR change notifications under /isr_change_notification."""


@dataclass(frozen=True)
class TopicDeletionsQueued:
    """Topics are queued for deletion under /admin/delete_topics."""


@dataclass(frozen=True)
class ReassignmentsStarted:
    """The controller's own follow-up to a Reassign it answered: complete at once the
    partitions whose target replicas are all in sync already."""

    keys: tuple[Key, ...]


Event = (
    BrokersChanged
    | TopicsChanged
    | PartitionsChanged
    | ConfigsChanged
    | IsrChangesReported
    | TopicDeletionsQueued
    | ReassignmentsStarted
)


@dataclass(frozen=True)
class ControlledShutdown:
    """A broker asks to go: its leaderships move, it leaves the ISRs (KIP-113's broker epoch
    checked when not -1)."""

    broker_id: int
    broker_epoch: int


@dataclass(frozen=True)
class ElectLeaders:
    """ElectLeaders (KIP-460): ``election_type`` 0 preferred, 1 unclean; ``keys`` None for
    every partition."""

    election_type: int
    keys: tuple[Key, ...] | None


@dataclass(frozen=True)
class Reassign:
    """AlterPartitionReassignments (KIP-455): target replicas per partition, None to cancel;
    ``allow_rf_change`` False (v1, KIP-860) refuses a target of another replication factor."""

    targets: Mapping[Key, tuple[int, ...] | None]
    allow_rf_change: bool = True


@dataclass(frozen=True)
class ListReassignments:
    """ListPartitionReassignments: ``keys`` None for every partition."""

    keys: tuple[Key, ...] | None


Request = ControlledShutdown | ElectLeaders | Reassign | ListReassignments
