"""Consumer groups: Kafka 0.10.1's group coordinator (membership, rebalances, committed offsets).

- :mod:`broker.groups.state`: the pure group state machine (no I/O, time passed in).
- :mod:`broker.groups.offsets`: ``__consumer_offsets`` record formats and the offset cache.
- :mod:`broker.groups.coordinator`: the trio coordinator; :func:`setup` is the broker's hook.
- :mod:`broker.groups.handlers`: ``GROUP_HANDLERS`` for the broker's dispatch table.
- :mod:`broker.groups.cli`: ``chronolog groups`` (list / describe over the Kafka protocol).
"""

from broker.groups.coordinator import OFFSETS_TOPIC, GroupCoordinator, setup
from broker.groups.state import GroupMachine, GroupState, IllegalGroupTransitionError

__all__ = [
    "setup",
    "GroupCoordinator",
    "GroupMachine",
    "GroupState",
    "OFFSETS_TOPIC",
    "IllegalGroupTransitionError",
]
