"""delayq as `pip install` leaves it: the wheel installed into an empty virtualenv (its
dependencies from the package index), used from outside the source tree. Only
`cluster` and `actors` are installed as import names, and `delayq node` and
`delayq web` run from that install against the local stack: a job scheduled through
the installed web server is fired by the installed node."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from cluster.devstack.nodes import settings_env
from cluster.settings.config import Settings
from tests.conftest import Collector
from tests.unit.test_wheel import build_wheel

pytestmark = [pytest.mark.slow, pytest.mark.once]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    where = tmp_path_factory.mktemp("installed")
    wheel = build_wheel(where)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    pip = [str(where / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, str(wheel)], check=True, cwd=where, timeout=540)
    yield where / "venv"


def installed_python(venv: Path, code: str) -> str:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        cwd=venv,  # not the source tree: nothing is imported from it
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return done.stdout


def test_only_cluster_and_actors_are_installed(venv: Path) -> None:
    code = (
        "import importlib.metadata as m, cluster, actors;"
        "files = m.distribution('delayq').files or [];"
        "print(sorted({f.parts[0] for f in files if not f.parts[0].startswith('..')}));"
        "print(cluster.__file__)"
    )
    names, where = installed_python(venv, code).splitlines()
    assert [n for n in eval(names) if not n.endswith(".dist-info")] == ["actors", "cluster"]
    assert where.startswith(str(venv)), "cluster was imported from the source tree"
    assert (venv / "bin" / "delayq").exists()


async def test_the_installed_node_fires_what_the_installed_web_server_took(
    venv: Path, settings: Settings, topic: str, collector: Collector, tmp_path: Path
) -> None:
    env = {**os.environ, **settings_env(settings), "DELAYQ_WEB_TOKENS": ""}
    env.pop("PYTHONPATH", None)
    delayq = str(venv / "bin" / "delayq")
    ready = tmp_path / "node.ready"
    node = subprocess.Popen(
        [delayq, "node", "--ready-file", str(ready)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    web = await asyncio.create_subprocess_exec(
        delayq, "web", "--host", "127.0.0.1", "--port", "0", cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert node.poll() is None, "the installed node exited while starting"
            assert time.monotonic() < deadline, "the installed node did not start"
            await asyncio.sleep(0.1)
        assert web.stdout is not None
        line = b""
        while b"delayq web on" not in line:
            line = await asyncio.wait_for(web.stdout.readline(), 60)
            assert line, "the installed web server exited"
        base = line.decode().split(" on ", 1)[1].strip().rstrip("/")
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/healthz") as health:
                assert health.status == 200
            job = {"topic": topic, "payload": {"from": "installed"}, "delay": 0.2}
            json_body = {"Content-Type": "application/json"}
            async with http.post(
                base + "/v1/jobs", data=orjson.dumps(job), headers=json_body
            ) as answer:
                assert answer.status == 201, await answer.text()
                job_id = (await answer.json())["job_id"]
        [record] = await collector.until(1, timeout_s=30)
        assert (record["job_id"], record["payload"]) == (job_id, {"from": "installed"})
    finally:
        node.send_signal(signal.SIGTERM)
        web.terminate()
        assert await asyncio.to_thread(node.wait, 60) == 0
        assert await asyncio.wait_for(web.wait(), 30) == 0
