"""Pause, snapshots and fork through the Python SDK (sync and asyncio)
against a real runbox serve with the host provider: pause and resume go
through the server (an exec on a paused sandbox raises SandboxPaused, the
sandbox's info says paused); the host provider cannot snapshot or fork
(Unsupported); unknown snapshots are InvalidSpec."""

from __future__ import annotations

import asyncio

import pytest
from conftest import Server

import runbox
import runbox.aio


def test_pause_resume(client: runbox.Client, sb: runbox.Sandbox) -> None:
    sb.pause()
    assert sb.paused()
    assert client.get(sb.id).info.paused
    with pytest.raises(runbox.SandboxPaused):
        sb.run("true")
    sb.resume()
    assert not client.get(sb.id).info.paused
    assert sb.run("echo ok").stdout == "ok\n"


def test_snapshot_unsupported_on_host(client: runbox.Client, sb: runbox.Sandbox) -> None:
    with pytest.raises(runbox.Unsupported):
        sb.snapshot("base")
    with pytest.raises(runbox.Unsupported):
        sb.fork(2)
    assert client.snapshots() == []
    with pytest.raises(runbox.InvalidSpec):
        client.delete_snapshot("nope")
    with pytest.raises(runbox.InvalidSpec):
        client.create(from_snapshot="nope")


def test_aio_branch(server: Server) -> None:
    async def main() -> None:
        async with runbox.aio.AsyncClient(server.url, server.token()) as c:
            async with await c.create() as sb:
                await sb.pause()
                assert await sb.paused()
                await sb.resume()
                assert not await sb.paused()
                with pytest.raises(runbox.Unsupported):
                    await sb.snapshot()
                with pytest.raises(runbox.Unsupported):
                    await sb.fork(1)
                assert await c.snapshots() == []
                with pytest.raises(runbox.InvalidSpec):
                    await c.delete_snapshot("nope")

    asyncio.run(main())
