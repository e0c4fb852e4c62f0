"""Enum members read at the speed of class attributes on Python 3.11.

Python 3.11's ``EnumType`` defines ``__getattr__``, a fallback from the time members were not
in their class's ``__dict__``. A metaclass with ``__getattr__`` sends every class attribute
read through a Python-level hook the interpreter cannot specialise, so each ``ErrorCode.NONE``
or ``ApiKey.FETCH`` costs about 0.1 µs instead of 0.03, and a produce request makes dozens of
them: 5.5 % of its instructions (bench/NOTES.md). On 3.11 every member is in its class's
``__dict__`` (a member named like an Enum property, ``name`` or ``value``, as a redirecting
property), so the hook only ever turns a miss into AttributeError; Python 3.12 removed it for
this reason (CPython gh-93910, gh-106762). Only the serve process drops it, at start-up.
"""

from __future__ import annotations

import enum
import sys

__all__ = ["drop_enum_getattr_hook"]


def drop_enum_getattr_hook() -> bool:
    """Remove ``EnumType.__getattr__`` where Python still has it (before 3.12); whether it
    was removed by this call."""
    if sys.version_info >= (3, 12) or "__getattr__" not in vars(enum.EnumType):
        return False
    delattr(enum.EnumType, "__getattr__")
    return True
