"""Fault-suite fixtures: the storage tests' clock, and a real small filesystem to fill."""

from __future__ import annotations

import pytest

from tests.storage.helpers import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()
