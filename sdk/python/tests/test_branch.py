"""Pause, snapshots and fork through the Python SDK (sync and asyncio)
against a real runbox serve with the host provider: pause and resume go
through the server (an exec on a paused sandbox raises SandboxPaused, the
sandbox's info says paused); the host provider cannot snapshot or fork
(Unsupported); unknown snapshots are InvalidSpec. As root, the same
against serve with the local provider, which can: a snapshot and forks
that each keep their own writes."""

from __future__ import annotations

import asyncio
import os
import secrets

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


def test_snapshot_fork_local_server() -> None:
    if os.geteuid() != 0:
        pytest.skip("serve's local provider makes namespaces and a FUSE root: run as root (CI does)")
    s = Server(providers="local")
    s.start()
    try:
        c = s.client()
        mark = secrets.token_hex(8)
        with c.create(provider="local") as parent:
            assert parent.run(f"mkdir -p /opt/{mark} && echo parent > /opt/{mark}/f").exit_code == 0
            parent.pause()
            snap = parent.snapshot("base")
            assert parent.paused(), "a snapshot of a paused sandbox leaves it paused"
            parent.resume()
            assert snap.name == "base" and [x.name for x in c.snapshots()] == ["base"]
            forks = parent.fork(2)
            assert len(forks) == 2 and len({f.id for f in forks} | {parent.id}) == 3
            try:
                for i, f in enumerate(forks):
                    assert f.run(f"echo fork{i} > /opt/{mark}/f").exit_code == 0
                for i, f in enumerate(forks):
                    assert f.run(f"cat /opt/{mark}/f").stdout == f"fork{i}\n"
                assert parent.run(f"cat /opt/{mark}/f").stdout == "parent\n"
                with c.create(from_snapshot="base") as child:
                    assert child.run(f"cat /opt/{mark}/f").stdout == "parent\n"
            finally:
                for f in forks:
                    f.remove(force=True)
        c.delete_snapshot("base")
        assert all(x.name != "base" for x in c.snapshots())
    finally:
        s.close()
