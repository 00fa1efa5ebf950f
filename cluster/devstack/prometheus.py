"""A throw-away Prometheus server that scrapes delayq nodes, for tests and demos.

    server = PrometheusServer(workdir, ["127.0.0.1:19464"], rule_files=[alerts])
    await server.start()
    value = await server.query("sum(delayq_jobs_fired_total)")
    server.stop()

It runs Debian's `prometheus` (installed when missing) with a 1 s scrape and rule
interval, its data in `workdir`, on 127.0.0.1:PORT.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from cluster.devstack.packages import ensure_prometheus

PORT = 19090  # not Prometheus' 9090, to stay clear of one running on this machine
SCRAPE_INTERVAL = "1s"


class PrometheusServer:
    def __init__(
        self,
        workdir: Path,
        targets: list[str],
        *,
        rule_files: list[Path] | None = None,
        port: int = PORT,
    ) -> None:
        self.workdir = workdir
        self.targets = targets
        self.rule_files = rule_files or []
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": "1s"},
            "rule_files": [str(path.resolve()) for path in self.rule_files],
            "scrape_configs": [
                {"job_name": "delayq", "static_configs": [{"targets": self.targets}]}
            ],
        }

    async def start(self, timeout_s: float = 60) -> None:
        program = await asyncio.to_thread(ensure_prometheus)
        proc = self._launch(program)
        deadline = time.monotonic() + timeout_s
        async with aiohttp.ClientSession() as http:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"prometheus exited: {self.log_tail()}")
                try:
                    async with http.get(f"{self.url}/-/ready") as answer:
                        if answer.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"prometheus not ready in {timeout_s} s: {self.log_tail()}")
                await asyncio.sleep(0.2)

    def _launch(self, program: str) -> subprocess.Popen[bytes]:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_bytes(orjson.dumps(self.config()))  # JSON is YAML
        log = (self.workdir / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [
                program,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self.proc

    async def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; its `data`."""
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{self.url}/api/v1/{path}", params=params) as answer,
        ):
            body = orjson.loads(await answer.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus {path} {params}: {body}")
        return body["data"]

    async def query(self, expr: str) -> float | None:
        """The value of an instant query with one result (None when it has none)."""
        result = (await self.api("query", query=expr))["result"]
        if not result:
            return None
        return float(result[0]["value"][1])

    def log_tail(self, lines: int = 20) -> str:
        path = self.workdir / "prometheus.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
