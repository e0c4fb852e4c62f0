"""broker.malloc: with the thresholds raised, a freed 1 MB request buffer is reused, not faulted
in again (counted in minor page faults, not timed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

SNIPPET = """
import resource, sys
applied = None
if sys.argv[1] == "tuned":
    # Imported only here: importing the broker's modules frees large blocks, and glibc then
    # raises its dynamic mmap threshold by itself, which would hide the default's faults.
    from broker.malloc import keep_freed_buffers
    applied = keep_freed_buffers()
frame = bytes(1_000_000)
for _ in range(5):
    bytes(bytearray(frame))  # two live 1 MB buffers, both freed again: a produce request's shape
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    bytes(bytearray(frame))
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", SNIPPET, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_freed_megabyte_buffers_are_reused_without_page_faults():
    applied, tuned = _faults("tuned")
    assert applied == "True"
    _, default = _faults("default")
    pages_per_round = 2 * 1_000_000 // 4096
    assert default > 50 * pages_per_round  # glibc's defaults fault the buffers in every round
    assert tuned < 5 * pages_per_round  # tuned: the same pages come back
