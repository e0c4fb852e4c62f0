"""Storage test fixtures; the helpers themselves live in tests/storage/helpers.py."""

from __future__ import annotations

import pytest

from tests.storage.helpers import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()
