"""``pip install .`` on a machine without a C compiler: the package installs without its C
extension, and the installed ``chronolog serve`` runs on the pure-Python paths."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

REPO = Path(__file__).resolve().parent.parent


def run(cmd, **kw):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert result.returncode == 0, (
        f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.mark.timeout(900)
def test_pip_install_without_a_compiler_then_serve(tmp_path):
    # no working compiler or linker
    env = {**os.environ, "CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}
    env.pop("CHRONOLOG_PURE_PYTHON", None)
    source = tmp_path / "source"  # the tracked files only: no build/ left by an earlier build
    for name in run(["git", "ls-files"], cwd=REPO).stdout.splitlines():
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((REPO / name).read_bytes())
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "pip"), "install", "-q", str(source)], env=env, cwd=tmp_path)
    found = run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import protocol, protocol.native as n; print(protocol.__file__); print(n.DESCRIPTION)",
        ],
        cwd=tmp_path,
        env=env,
    ).stdout.splitlines()
    assert found[0].startswith(str(venv))  # the installed copy, not the source tree
    assert found[1].startswith("pure Python (the C extension was not built")

    out = tmp_path / "serve.log"
    with open(out, "wb") as log_file:
        proc = subprocess.Popen(
            [
                str(venv / "bin" / "chronolog"),
                "serve",
                "--override",
                "listeners=PLAINTEXT://127.0.0.1:0",
                "--override",
                f"log.dirs={tmp_path / 'data'}",
            ],
            cwd=tmp_path,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline and proc.poll() is None:
            for line in out.read_text().splitlines():
                if '"listening"' in line:
                    entry = json.loads(line)
                    assert entry["record_scans"].startswith("pure Python")
                    port = entry["port"]
            time.sleep(0.1)
        assert port, out.read_text()[-3000:]
        bootstrap = f"127.0.0.1:{port}"
        producer = KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4")
        for i in range(100):
            producer.send("installed", b"m%d" % i)
        producer.flush(30)
        producer.close()
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, consumer_timeout_ms=3000
        )
        tp = TopicPartition("installed", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        assert [r.value for r in consumer] == [b"m%d" % i for i in range(100)]
        consumer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, out.read_text()[-3000:]


def test_the_extension_built_without_libdeflate_gives_the_same_crcs(tmp_path):
    """Without libdeflate's headers the extension uses its own table-driven CRC-32: built that
    way here, it must accept exactly what zlib's CRC says is intact, and refuse a flipped bit."""
    if subprocess.run(["cc", "--version"], capture_output=True).returncode != 0:
        pytest.skip("no C compiler on this machine")
    copy = tmp_path / "src"
    copy.mkdir()
    (copy / "protocol").mkdir()
    for name in ("_fastscan.c",):
        (copy / "protocol" / name).write_bytes((REPO / "protocol" / name).read_bytes())
    (copy / "setup.py").write_text(
        "from setuptools import Extension, setup\n"
        "setup(name='probe', ext_modules=[Extension('protocol._fastscan', "
        "['protocol/_fastscan.c'], extra_compile_args=['-O3', '-std=c11'])])\n"
    )
    run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=copy)
    script = (
        "import sys, zlib, struct\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "import importlib.util\n"
        "spec = importlib.util.spec_from_file_location('protocol._fastscan', next(__import__('glob').iglob("
        "sys.argv[1] + '/protocol/_fastscan*.so')))\n"
        "fs = importlib.util.module_from_spec(spec); spec.loader.exec_module(fs)\n"
        "from protocol.records import MessageSetBuilder\n"
        "b = MessageSetBuilder(magic=1)\n"
        "for i in range(300): b.append(bytes(range(i % 256)) * 3, key=b'k%d' % i, timestamp=i)\n"
        "buf = bytearray(b.build())\n"
        "assert fs.scan_v1(bytearray(buf), len(buf), 0, 0, -1, 2**62, 10**6, 0, False)[0] == 300\n"
        "buf[200] ^= 1\n"
        "assert fs.scan_v1(buf, len(buf), 0, 0, -1, 2**62, 10**6, 0, False) is None\n"
        "print('ok')\n"
    )
    out = run([sys.executable, "-c", script, str(copy)], cwd=REPO).stdout
    assert out.strip() == "ok"
