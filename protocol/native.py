"""The optional C extension, protocol/_fastscan.c: the module, or None.

setup.py builds it when the machine has a C compiler and skips it otherwise; every caller keeps
a pure-Python path that gives the same answers, only slower (the tests run both). Setting the
environment variable ``CHRONOLOG_PURE_PYTHON=1`` ignores a built extension, so that CI can run
the suite on the fallback too.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get("CHRONOLOG_PURE_PYTHON", "") not in ("", "0"):
        return None, "pure Python (CHRONOLOG_PURE_PYTHON is set)"
    try:
        module = importlib.import_module("protocol._fastscan")
    except ImportError:
        return None, "pure Python (the C extension was not built: no C compiler at install)"
    return module, "C extension protocol._fastscan"


fastscan, DESCRIPTION = _load()
"""The extension module or None; DESCRIPTION says which, for the broker's start-up line."""
