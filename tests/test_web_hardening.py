"""`delayq web` under attack: cross-site writes and DNS rebinding (content type, Host,
Origin), a client that never finishes its headers, many clients reading the cluster at
once, odd query numbers, a token written in the wrong place, and member records planted
in ZooKeeper (a metrics URL pointing elsewhere, escape sequences in a host name).

Against a real `delayq web` process, or the application on the real stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from actors.node import Node
from cluster import DelayClient
from cluster.connections import zk_conn
from cluster.devstack.nodes import settings_env
from cluster.scripts.facade import Scripts
from cluster.settings.config import Settings
from tests.conftest import wait_for
from tests.forwarder import free_port
from tests.test_dead_letters import make_dead
from tests.test_web import OPERATOR, TOKENS, Api, serving

# HTTP limits and input checks do not change under a Redis Cluster.
pytestmark = pytest.mark.once

JSON = {"Content-Type": "application/json"}


@contextlib.asynccontextmanager
async def delayq_web(settings: Settings, **env: str) -> AsyncIterator[str]:
    """A `delayq web` process on 127.0.0.1 (no tokens unless env gives them); its base URL."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cluster.cli.main",
        "web",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        env={**os.environ, **settings_env(settings), "DELAYQ_WEB_TOKENS": "", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        line = b""
        while b"delayq web on" not in line:
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            assert line, "delayq web exited"
        yield line.decode().split(" on ", 1)[1].strip().rstrip("/")
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 30)


@pytest.fixture
async def api(settings: Settings) -> AsyncIterator[Api]:
    """The application with tokens, on the test's stack (as in test_web.py)."""
    settings = settings.replace(web_tokens=TOKENS, max_delay_s=3600.0)
    async with DelayClient(settings) as client, serving(settings, client) as running:
        yield running


# ----- cross-site writes and DNS rebinding (finding 3) ----------------------------------------


async def test_a_write_must_be_json_and_name_this_server(
    settings: Settings, client: DelayClient, scripts: Scripts
) -> None:
    """On the token-less loopback server: a page of another origin (a form, a no-cors
    fetch) sends text/plain or a form type, and a rebound name sends its own Host."""
    await make_dead(client, scripts, "t", 2)
    async with delayq_web(settings) as base, aiohttp.ClientSession() as http:
        port = base.rsplit(":", 1)[1]
        job = orjson.dumps({"topic": "t", "payload": 1, "delay": 60, "job_id": "csrf-1"})
        for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
            headers = {"Content-Type": content_type} if content_type else {}
            async with http.post(f"{base}/v1/jobs", data=job, headers=headers) as answer:
                assert answer.status == 415, content_type
                assert answer.content_type == "application/problem+json"
                problem = await answer.json(content_type=None)
                assert problem["type"] == "urn:delayq:problem:unsupported-media-type"
            purge = b'{"all": true}'
            async with http.post(
                f"{base}/v1/dead-letters/purge", data=purge, headers=headers
            ) as answer:
                assert answer.status == 415
        async with http.delete(
            f"{base}/v1/jobs/csrf-1", data=b"x", headers={"Content-Type": "text/plain"}
        ) as answer:
            assert answer.status == 415
        assert await client.get("csrf-1") is None and await client.count_dead() == 2

        # Another page on loopback (another port), and a name that is not this server's.
        for headers, status, kind in (
            ({**JSON, "Origin": "http://127.0.0.1:1"}, 403, "cross-origin"),
            ({**JSON, "Origin": "null"}, 403, "cross-origin"),
            ({**JSON, "Host": f"evil.example:{port}"}, 421, "misdirected-request"),
            ({**JSON, "Host": "evil.example"}, 421, "misdirected-request"),
        ):
            async with http.post(
                f"{base}/v1/dead-letters/purge", data=b'{"all": true}', headers=headers
            ) as answer:
                assert answer.status == status, headers
                assert (await answer.json(content_type=None))["type"].endswith(kind)
        for path in ("/healthz", "/", "/openapi.json", "/v1/dead-letters"):
            async with http.get(base + path, headers={"Host": "evil.example"}) as answer:
                assert answer.status == 421, path
        assert await client.count_dead() == 2

        # This server's own names and origin are served.
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            async with http.get(base + "/healthz", headers={"Host": host}) as answer:
                assert answer.status == 200, host
        same_origin = {**JSON, "Origin": base}
        async with http.post(f"{base}/v1/jobs", data=job, headers=same_origin) as answer:
            assert answer.status == 201
        async with http.delete(f"{base}/v1/jobs/csrf-1", headers={"Origin": base}) as answer:
            assert answer.status == 200  # a DELETE without a body needs no content type


async def test_web_allowed_hosts_adds_names(settings: Settings) -> None:
    settings = settings.replace(web_allowed_hosts="delayq.example.com, Ops.Example.com.")
    async with delayq_web(settings) as base, aiohttp.ClientSession() as http:
        for host, status in (
            ("delayq.example.com", 200),
            ("ops.example.com:8443", 200),
            ("example.com", 421),
            ("10.1.2.3:8470", 200),  # an address: no name to rebind
        ):
            async with http.get(base + "/healthz", headers={"Host": host}) as answer:
                assert answer.status == status, host
        # Behind a proxy that rewrites Host, the public name is a trusted Origin.
        headers = {"Origin": "https://delayq.example.com", "Host": "127.0.0.1"}
        async with http.get(base + "/healthz", headers=headers) as answer:
            assert answer.status == 200
        headers = {"Origin": "https://example.com", "Host": "127.0.0.1"}
        async with http.get(base + "/healthz", headers=headers) as answer:
            assert answer.status == 403
    for name, value in (
        ("web_allowed_hosts", "https://delayq.example.com"),
        ("web_header_timeout_s", "0"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", "web", "--port", "0"],
            env={**os.environ, **settings_env(settings), f"DELAYQ_{name.upper()}": value},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0 and name in done.stderr, done.stderr


# ----- slow headers, many cluster readers, large bodies (finding 4) ---------------------------


async def test_headers_that_never_finish_are_cut_off(settings: Settings) -> None:
    async with delayq_web(settings, DELAYQ_WEB_HEADER_TIMEOUT_S="1") as base:
        port = int(base.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")

        async def drip() -> None:
            with contextlib.suppress(ConnectionError):
                while True:  # a header byte now and then: never the blank line
                    await asyncio.sleep(0.2)
                    writer.write(b"X")
                    await writer.drain()

        dripping = asyncio.create_task(drip())
        try:
            # Closed by the server: read() ends. Before, it was held open for ever.
            try:
                rest = await asyncio.wait_for(reader.read(), 60)
            except ConnectionResetError:
                rest = b""
            assert rest == b""
        finally:
            dripping.cancel()
            writer.close()
        # A connection that sends its request is served, and kept alive meanwhile.
        async with aiohttp.ClientSession() as http:
            for _ in range(2):
                async with http.get(base + "/healthz") as answer:
                    assert answer.status == 200
                await asyncio.sleep(1.5)


async def test_many_cluster_readers_share_one_zookeeper_session(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = 0
    real_open_zk = zk_conn.open_zk

    async def counting_open_zk(*args: Any, **kwargs: Any) -> Any:
        nonlocal opened
        opened += 1
        return await real_open_zk(*args, **kwargs)

    import cluster.observe.status

    monkeypatch.setattr(cluster.observe.status, "open_zk", counting_open_zk)
    node = Node(settings)
    await node.start()
    try:
        async with DelayClient(settings) as client, serving(settings, client) as api:

            async def owned() -> bool:
                status, body, _ = await api.call("GET", "/v1/cluster")
                return status == 200 and all(s["owner"] for s in body["slot_status"])

            assert await wait_for(owned, timeout_s=60)
            opened = 0
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as http:

                async def one() -> int:
                    async with http.get(api.base + "/v1/cluster") as answer:
                        await answer.read()
                        return answer.status

                answers = await asyncio.gather(*(one() for _ in range(CLUSTER_READERS)))
            assert answers == [200] * CLUSTER_READERS
            assert opened <= 1  # reopened at most once (none while the first is open)
    finally:
        await node.stop()


CLUSTER_READERS = 400


async def test_a_body_of_too_many_objects_is_refused_unparsed(api: Api) -> None:
    flood = b'{"jobs":[' + b"{}," * 5_000_000 + b"{}]}"
    status, body, _ = await api.call("POST", "/v1/jobs", raw=flood)
    assert status == 413 and "objects and arrays" in body["detail"], body
    # A large valid batch (parsed and validated off the event loop) is scheduled.
    jobs = [{"topic": "t", "payload": {"i": i}, "delay": 600} for i in range(20_000)]
    status, body, _ = await api.call("POST", "/v1/jobs", {"jobs": jobs})
    assert status == 200 and len(body["jobs"]) == 20_000
    assert all(job["created"] for job in body["jobs"])
    bad = [*jobs[:10_000], {"topic": "t"}]
    status, body, _ = await api.call("POST", "/v1/jobs", {"jobs": bad})
    assert status == 422 and body["detail"].startswith("job 10000:"), body


# ----- small ones (finding 6) --------------------------------------------------------------------


@pytest.mark.parametrize(
    "limit", ["²", "١٢", "５", "-1", "0", "1001", "99999999999999999999999", " 5", "+5", "1e3"]
)
async def test_a_bad_limit_is_refused_never_a_server_error(api: Api, limit: str) -> None:
    for route in ("/v1/dead-letters", "/v1/expired"):
        async with api.http.get(
            api.base + route,
            params={"limit": limit},
            headers={"Authorization": f"Bearer {OPERATOR}"},
        ) as answer:
            assert answer.status == 422, (route, limit)
            assert "limit must be an integer" in (await answer.json(content_type=None))["detail"]


def test_a_token_written_before_its_role_is_never_printed(settings: Settings) -> None:
    secret = "s3cret-token-0123456789abcdef"
    for tokens in (f"operator={secret}", f"{TOKENS},viewer={secret}"):
        done = subprocess.run(
            [sys.executable, "-m", "cluster.cli.main", "web", "--port", "0"],
            env={**os.environ, **settings_env(settings), "DELAYQ_WEB_TOKENS": tokens},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode != 0
        assert secret not in done.stdout + done.stderr
        assert "TOKEN=ROLE" in done.stderr


# ----- member records planted in ZooKeeper (finding 6) ----------------------------------------


@contextlib.asynccontextmanager
async def planted(settings: Settings, record: dict[str, Any]) -> AsyncIterator[None]:
    """A member znode nobody's node wrote, as anyone who may write ZooKeeper could."""
    zk = await zk_conn.open_zk(settings)
    try:
        await zk.create(
            f"{settings.zk_cluster_root}/members/m-",
            data=orjson.dumps(record),
            ephemeral=True,
            sequential=True,
        )
        yield
    finally:
        await zk.close()


@contextlib.asynccontextmanager
async def internal_service() -> AsyncIterator[tuple[int, list[str]]]:
    """An HTTP service on loopback that no scraper should reach but at /metrics: its
    port and the paths asked of it. /metrics answers with a redirect or without end."""
    asked: list[str] = []

    async def any_path(request: web.Request) -> web.StreamResponse:
        asked.append(request.path_qs)
        if request.path == "/metrics" and request.query.get("x") is None:
            response = web.StreamResponse()
            await response.prepare(request)
            with contextlib.suppress(ConnectionError):
                for _ in range(300):  # 19.5 MB, more than a scrape reads
                    await response.write(b"# " + b"a" * 65_000 + b"\n")
            return response
        raise web.HTTPFound("/internal/secret")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_path)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield port, asked
    finally:
        await runner.cleanup()


async def test_planted_members_cannot_point_the_server_anywhere(settings: Settings) -> None:
    node = Node(settings)
    await node.start()
    try:
        async with (
            internal_service() as (port, asked),
            DelayClient(settings) as client,
            serving(settings, client) as api,
        ):
            urls = {
                "path": f"http://127.0.0.1:{port}/internal/secret",
                "query": f"http://127.0.0.1:{port}/metrics?x=1",
                "user": f"http://admin:pw@127.0.0.1:{port}/metrics",
                "metadata": "http://169.254.169.254:80/metrics",
                # IPv4 in other notations: the same addresses, written to slip past
                "hex-metadata": "http://0xa9fea9fe:80/metrics",
                "hex": f"http://0x7f000001:{port}/metrics",
                "decimal": f"http://2130706433:{port}/metrics",
                "octal": f"http://0177.0.0.1:{port}/metrics",
                "endless": f"http://127.0.0.1:{port}/metrics",
            }
            async with contextlib.AsyncExitStack() as stack:
                for name, url in urls.items():
                    record = {"node_id": name, "host": "127.0.0.1", "metrics_url": url}
                    await stack.enter_async_context(planted(settings, record))

                async def seen() -> dict[str, str]:
                    status, body, _ = await api.call("GET", "/v1/cluster/stats")
                    assert status == 200, body
                    snapshot = body["snapshot"] or {"members": []}
                    return {m["node_id"]: m["metrics"] for m in snapshot["members"]}

                assert await wait_for(lambda: _has(seen, set(urls)), timeout_s=30)
                metrics = await seen()
            refused = ["path", "query", "user", "metadata", "hex-metadata", "hex", "decimal"]
            for name in [*refused, "octal"]:
                assert metrics[name].startswith("refused"), metrics
            assert metrics["endless"] == "too large", metrics
            assert asked and set(asked) == {"/metrics"}, asked  # nothing else, no redirect
    finally:
        await node.stop()


async def _has(seen: Any, names: set[str]) -> bool:
    return names <= set(await seen())


async def test_cluster_status_prints_no_escape_sequence_a_member_planted(
    settings: Settings,
) -> None:
    node = Node(settings)
    await node.start()
    try:
        record = {"node_id": "n\x1b]0;owned\x07", "host": "\x1b[31mred\x9b2J", "pid": 1}
        async with planted(settings, record):
            for extra in ([], ["--json"]):
                done = await asyncio.to_thread(
                    subprocess.run,
                    [sys.executable, "-m", "cluster.cli.main", "cluster", "status", *extra],
                    env={**os.environ, **settings_env(settings)},
                    capture_output=True,
                    timeout=120,
                )
                assert done.returncode == 0, done.stderr
                assert b"\x1b" not in done.stdout and b"\x07" not in done.stdout
                assert "\x9b" not in done.stdout.decode()
                assert b"red" in done.stdout
    finally:
        await node.stop()


async def test_web_serves_its_process_metrics_on_metrics_port(settings: Settings) -> None:
    """With metrics_port, `delayq web` serves /metrics there (RSS, open files, asyncio
    tasks: watched in a soak like a node), never on the API's port."""
    port = free_port()
    async with (
        delayq_web(settings, DELAYQ_METRICS_PORT=str(port)) as base,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            assert response.status == 200
            text = await response.text()
        async with http.get(f"{base}/metrics") as response:
            assert response.status == 404
    samples = {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    assert samples["delayq_asyncio_tasks"] >= 1
    assert samples["process_resident_memory_bytes"] > 0
    assert samples["process_open_fds"] > 0


async def test_web_refuses_a_taken_metrics_port_in_one_line(settings: Settings) -> None:
    """A metrics_port another process holds ends `delayq web` at start with one clear
    line (after closing what it had opened), not a traceback."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        done = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cluster.cli.main",
            "web",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            env={**os.environ, **settings_env(settings), "DELAYQ_METRICS_PORT": str(taken)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output, _ = await asyncio.wait_for(done.communicate(), 60)
    assert done.returncode != 0
    text = output.decode()
    assert str(taken) in text, text
    assert "Traceback" not in text, text
