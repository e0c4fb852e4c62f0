"""The broker says at start which record scans it runs: the C extension, or the pure-Python
fallback (no compiler at install, or CHRONOLOG_PURE_PYTHON set)."""

from __future__ import annotations

import json
import os

from protocol import native


def test_the_listening_line_names_the_record_scans(broker_factory):
    proc = broker_factory()
    line = next(
        json.loads(line) for line in proc.log_output().splitlines() if '"listening"' in line
    )
    assert line["record_scans"] == native.DESCRIPTION
    pure = os.environ.get("CHRONOLOG_PURE_PYTHON", "") not in ("", "0")
    assert line["record_scans"].startswith("pure Python" if pure else "C extension")
