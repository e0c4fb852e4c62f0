"""Helpers of the docker tests: a compose file as Debian's docker-compose resolves it, and the
``--override`` settings of a service's command."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

needs_docker_compose = pytest.mark.skipif(
    shutil.which("docker-compose") is None,
    reason="docker-compose not installed (`make install-test` installs it)",
)


def compose_config(compose_file: Path, **env: str) -> dict:
    """``docker-compose -f compose_file config``, parsed, with ``env`` set and otherwise
    without CHRONOLOG_BASE_IMAGE / CHRONOLOG_DOCKER_SOCKET (the file's defaults apply)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CHRONOLOG_BASE_IMAGE", "CHRONOLOG_DOCKER_SOCKET")
    }
    result = subprocess.run(
        ["docker-compose", "-f", str(compose_file), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**environ, **env},
    )
    assert result.returncode == 0, f"docker-compose config failed:\n{result.stderr}"
    return yaml.safe_load(result.stdout)


def command_overrides(command: list[str]) -> dict[str, str]:
    """The ``--override key=value`` settings of a ``chronolog serve`` command."""
    values = [command[i + 1] for i, arg in enumerate(command) if arg == "--override"]
    return dict(v.split("=", 1) for v in values)
