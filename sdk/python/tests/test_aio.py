"""runbox.aio against the real server: the sync suite's cases, on asyncio."""

from __future__ import annotations

import asyncio
import os
import random
import signal
from typing import Any, Awaitable, Callable

import pytest
from conftest import Proxy, Server, count_procs, kill_procs, marker, runboxd_pid

import runbox
import runbox.aio


def arun(fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
    return asyncio.run(fn(*args))


def aclient(server: Server, **kw: Any) -> runbox.aio.AsyncClient:
    return runbox.aio.AsyncClient(server.url, server.token(), **kw)


def test_run_exit_codes_and_streams(server: Server) -> None:
    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            res = await sb.run("echo out; echo err >&2; exit 3", timeout=30)
            assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
            assert (await sb.run(["sh", "-c", "kill -9 $$"], timeout=30)).exit_code == 137
            res = await sb.run("echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c", timeout=30, merge_output=True)
            assert res.merged == "a\nb\nc\n"
            assert (await sb.run("cat", stdin="in\n", timeout=30)).stdout == "in\n"

    arun(main)


def test_execs_without_output(server: Server) -> None:
    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            res = await sb.run("echo out; echo err >&2; exit 3", timeout=30)
            full = next(e for e in await sb.execs() if e.id == res.id)
            assert full.result is not None and (full.result.stdout, full.result.stderr) == ("out\n", "err\n")
            bare = next(e for e in await sb.execs(omit_output=True) if e.id == res.id)
            assert bare.result is not None and (bare.result.stdout, bare.result.stderr) == ("", "")
            assert (bare.result.exit_code, bare.result.stdout_bytes, bare.result.stderr_bytes) == (3, 4, 4)

    arun(main)


def test_timeout_kills_the_tree_and_the_next_command_works(server: Server) -> None:
    m = marker()

    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            res = await sb.run(m.sh + "sleep $M & sleep $M", timeout=1)
            assert res.timed_out and count_procs(m) == 0
            assert (await sb.run("echo next", timeout=30)).stdout == "next\n"

    arun(main)


def test_stream_output_as_async_iterator(server: Server) -> None:
    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            async with await sb.start("for i in 1 2 3; do echo $i; sleep 0.1; done; echo e >&2", timeout=30) as p:
                got = [(ch.stream, ch.text) async for ch in p]
            # Chunks are what each read got: under load two lines may share one.
            assert "".join(t for st, t in got if st == "stdout") == "1\n2\n3\n"
            assert got[-1] == ("stderr", "e\n") and len(got) >= 2
            assert p.result is not None and p.result.exit_code == 0
            p = await sb.start("tr a-z A-Z", stdin_stream=True, timeout=30)
            await p.write_stdin("hi\n")
            await p.close_stdin()
            assert (await p.wait()).stdout == "HI\n"

    arun(main)


def test_task_cancellation_cancels_the_exec(server: Server) -> None:
    m = marker()

    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            for call in ("run", "wait"):
                if call == "run":
                    task = asyncio.ensure_future(sb.run(m.sh + "sleep $M & sleep $M", timeout=600))
                else:
                    p = await sb.start(m.sh + "sleep $M & sleep $M", timeout=600)
                    task = asyncio.ensure_future(p.wait())
                # The task must have started before it is cancelled: a task
                # cancelled before its first step never runs its coroutine
                # (Python's rule), so no SDK code would see the cancel. The
                # wait path's processes are there at once (start returned on
                # the started event), so without this await the loop below
                # would cancel a task that never ran, now and then, and wait
                # for ever for processes nothing stops.
                await asyncio.sleep(0.02)
                while count_procs(m) < 2:
                    await asyncio.sleep(0.02)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                for _ in range(1500):  # the stop protocol ran in the sandbox
                    if count_procs(m) == 0:
                        break
                    await asyncio.sleep(0.02)
                assert count_procs(m) == 0, f"{call}: the cancelled exec's processes are still there after 30 s"
                execs = await sb.execs()
                assert execs and all(e.state != "running" for e in execs)
            p = await sb.start("sleep 1000", timeout=600)
            res = await p.cancel(wait=True)
            assert isinstance(res, runbox.Result) and res.cancelled

    arun(main)


def test_reattach_after_a_cut_connection(server: Server, proxy: Proxy) -> None:
    async def main() -> None:
        c = runbox.aio.AsyncClient(proxy.url, server.token())
        async with await c.create(provider="host") as sb:
            p = await sb.start("for i in $(seq 1 30); do echo $i; sleep 0.05; done", timeout=60)
            got = []
            async for ch in p:
                got.append(ch.data)
                if len(got) == 3:
                    proxy.drop()
            assert b"".join(got) == b"".join(b"%d\n" % i for i in range(1, 31))
            assert p.reconnects >= 1 and p.result is not None and p.result.exit_code == 0
            again = await sb.attach(p.id, from_seq=1)
            assert b"".join([ch.data async for ch in again]).startswith(b"1\n2\n")

    arun(main)


def test_recreated_and_errors(server: Server) -> None:
    async def main() -> None:
        async with aclient(server) as c:
            with pytest.raises(runbox.SandboxNotFound):
                await c.get("sb-nope")
            async with await c.create(provider="host", recreate=True) as sb:
                os.kill(runboxd_pid(server, sb._sync), signal.SIGKILL)
                p = await sb.start("echo fresh", timeout=30)
                res = await p.wait()
                assert res.recreated and p.recreated and res.stdout == "fresh\n"
                with pytest.raises(runbox.ExecNotFound):
                    await sb.attach("py-nope")
                with pytest.raises(runbox.InvalidSpec):
                    await sb.run("true", timeout=-1)
                await sb.files.write("d/a.txt", "hello")
                assert await sb.files.read("d/a.txt") == b"hello"
                assert [f.path for f in await sb.files.list("d")] == ["a.txt"]
            assert not [s for s in await c.list() if s.id == sb.id]

    arun(main)


def test_lost_sandbox_raises(server: Server) -> None:
    m = marker()

    async def main() -> None:
        async with aclient(server, reconnect_window=2) as c:
            sb = await c.create(provider="host")
            try:
                p = await sb.start(m.sh + "echo up; sleep $M", timeout=60)
                it = p.__aiter__()
                assert (await it.__anext__()).data == b"up\n"
                os.kill(runboxd_pid(server, sb._sync), signal.SIGKILL)
                with pytest.raises(runbox.SandboxLost):
                    await it.__anext__()
            finally:
                kill_procs(m)
                await sb.remove(force=True)

    arun(main)


def test_many_at_once(server: Server) -> None:
    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            results = await asyncio.gather(*(sb.run(f"echo {i}", timeout=60) for i in range(20)))
            assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]

    arun(main)


def test_task_cancelled_at_random_moments_leaves_nothing_running(server: Server) -> None:
    # Cancel before the request went out, while the exec starts, while it
    # runs: whatever the moment, no process of it is left and no exec runs.
    async def main() -> None:
        async with aclient(server) as c, await c.create(provider="host") as sb:
            for _ in range(20):
                m = marker()
                task = asyncio.ensure_future(sb.run(m.sh + "sleep $M & sleep $M", timeout=600))
                await asyncio.sleep(random.uniform(0, 0.05))
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                for _ in range(3000):
                    if count_procs(m) == 0 and all(e.state != "running" for e in await sb.execs()):
                        break
                    await asyncio.sleep(0.02)
                assert count_procs(m) == 0
                assert all(e.state != "running" for e in await sb.execs())

    arun(main)
