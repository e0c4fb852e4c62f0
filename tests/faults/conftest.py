"""Fault-suite fixtures: the storage tests' clock, and a real small filesystem to fill."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.storage.helpers import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


FS_BYTES = 8 << 20


@pytest.fixture
def small_fs(tmp_path):
    """A FS_BYTES tmpfs mounted for this test: ENOSPC is the kernel's, not injected."""
    mount_point = tmp_path / "small-fs"
    mount_point.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
