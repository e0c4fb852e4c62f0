"""Consumer groups: Kafka's classic group coordinator as 3.9 serves it (membership with static
members, eager and cooperative rebalances, committed offsets, transactional offset commits).

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
