"""A ZooKeeper session whose connection breaks while it sets its watches again, against
the real local ZooKeeper through a relay that closes connections on cue
(cluster/connections/zk_conn.py, _Session.set_existing_watches).

After a reconnect a session sends SetWatches for every watch it holds. When the new
connection broke before that request was answered, aiozk's session waited for itself
to be repaired and never was: every later request hung."""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid

import pytest
from aiozk import protocol
from aiozk.states import States

from cluster.connections.zk_conn import open_zk
from cluster.settings.config import Settings

# ZooKeeper's side does not change with the Redis and MySQL shape.
pytestmark = pytest.mark.once

HOST = "127.0.0.1"
SET_WATCHES = 101  # the request type of SetWatches in ZooKeeper's protocol
BOUND_S = 60.0  # far beyond a repair; reached only by a session that hangs


class ClosingRelay:
    """Forwards connections to ZooKeeper and reads the client's requests (4-byte length
    frames; after the connect request, each starts with xid and type). drop() closes
    every open connection; with `close_on_set_watches` > 0 it closes the connection
    carrying the next SetWatches instead of forwarding it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.close_on_set_watches = 0
        self.closed_on_set_watches = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def drop(self) -> None:
        for writer in list(self._writers):
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        self._writers |= {writer, up_writer}
        for task in (
            asyncio.create_task(self._requests(reader, up_writer, writer)),
            asyncio.create_task(self._answers(up_reader, writer)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _requests(
        self,
        reader: asyncio.StreamReader,
        up: asyncio.StreamWriter,
        client: asyncio.StreamWriter,
    ) -> None:
        first = True  # the connect request has no xid and type
        try:
            while True:
                head = await reader.readexactly(4)
                if first and head.isalpha():  # a four-letter command ("srvr"): no frames
                    up.write(head)
                    await up.drain()
                    continue
                (length,) = struct.unpack(">i", head)
                body = await reader.readexactly(length)
                kind = None if first else struct.unpack(">i", body[4:8])[0]
                first = False
                if kind == SET_WATCHES and self.close_on_set_watches > 0:
                    self.close_on_set_watches -= 1
                    self.closed_on_set_watches += 1
                    client.close()
                    up.close()
                    return
                up.write(struct.pack(">i", length) + body)
                await up.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                up.close()

    async def _answers(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                client.write(data)
                await client.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                client.close()


async def test_a_connection_lost_while_setting_watches_again_does_not_hang_the_session(
    settings: Settings,
) -> None:
    zk_port = int(settings.zk_hosts.split(",")[0].rsplit(":", 1)[1])
    relay = ClosingRelay(zk_port)
    await relay.start()
    through_relay = Settings.from_env(
        {
            "DELAYQ_ZK_HOSTS": f"{HOST}:{relay.port}",
            "DELAYQ_ZK_SESSION_TIMEOUT_MS": "10000",
            "DELAYQ_ZK_AUTH": settings.zk_auth,
        }
    )
    path = f"/delayq-repair-{uuid.uuid4().hex[:12]}"
    zk = await open_zk(through_relay)
    direct = await open_zk(settings)
    changed = asyncio.Event()
    try:
        await zk.create(path, b"0")
        zk.session.add_watch_callback(
            protocol.WatchEvent.DATA_CHANGED, path, lambda _: changed.set()
        )
        await zk.exists(path, watch=True)
        session_id = zk.session.session_id

        relay.close_on_set_watches = 1
        relay.drop()  # the session reconnects; the relay closes it again on SetWatches
        assert await asyncio.wait_for(zk.exists(path), BOUND_S)
        assert relay.closed_on_set_watches == 1
        assert zk.session.state == States.CONNECTED
        assert zk.session.session_id == session_id  # the same session, repaired

        # Its watch was set again on the connection after the broken one.
        await direct.set_data(path, b"1")
        await asyncio.wait_for(changed.wait(), BOUND_S)
    finally:
        with contextlib.suppress(Exception):
            await direct.delete(path)
        await asyncio.gather(zk.close(), direct.close(), return_exceptions=True)
        await relay.close()
