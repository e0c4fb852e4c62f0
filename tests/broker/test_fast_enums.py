"""broker.fast_enums: without Python 3.11's EnumType.__getattr__ every member still resolves to
itself, through its class's __dict__, for every enum the broker imports; a miss still raises
AttributeError. Run in a child process, which then holds the change alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

SNIPPET = """
import enum
import broker.server, broker.cli, storage.log, protocol.validator  # every room's enums

def enums(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from enums(sub)

classes = [c for c in set(enums(enum.Enum)) if c._member_map_]
before = {c: {name: getattr(c, name) for name in c._member_map_} for c in classes}
from broker.fast_enums import drop_enum_getattr_hook
removed = drop_enum_getattr_hook()
assert removed and "__getattr__" not in vars(enum.EnumType)
assert not drop_enum_getattr_hook()  # once only
for c, members in before.items():
    for name, member in members.items():
        assert getattr(c, name) is member, (c, name)
        assert any(name in vars(k) for k in c.__mro__), (c, name)  # found without the hook
from protocol.errors import ErrorCode
try:
    ErrorCode.NO_SUCH_MEMBER
except AttributeError:
    pass
else:
    raise AssertionError("a missing member resolved")
print(len(classes), sum(len(m) for m in before.values()))
"""


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 has no EnumType.__getattr__")
def test_every_member_resolves_without_the_getattr_hook():
    out = subprocess.run(
        [sys.executable, "-c", SNIPPET], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    classes, members = map(int, out.stdout.split())
    assert classes > 20 and members > 300  # ErrorCode, ApiKey, Codec, ... were all checked
