"""Local mode (runbox.local): no server, no token; sandboxes made by the
CLI and reached over their runboxd's socket with their secret. Run on the
host provider and on the local one (skipped where this machine cannot make
local sandboxes, unless RUNBOX_REQUIRE_LOCAL=1)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import tempfile
from typing import Iterator

import pytest
from conftest import bin_dir, count_procs, kill_procs, marker

import runbox
import runbox.aio
from runbox._connect import Transport


@pytest.fixture(scope="module")
def home() -> Iterator[str]:
    h = tempfile.mkdtemp(prefix="rbpyl", dir="/tmp")
    yield h
    for name in os.listdir(os.path.join(h, "sandboxes")) if os.path.isdir(os.path.join(h, "sandboxes")) else []:
        try:
            with open(os.path.join(h, "sandboxes", name, "sandbox.json")) as f:
                os.kill(int(json.load(f)["pid"]), signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass
    shutil.rmtree(h, ignore_errors=True)


@pytest.fixture(scope="module")
def lc(home: str) -> Iterator[runbox.Local]:
    saved = dict(os.environ)
    # Nothing of a server: local mode must need neither host nor token.
    os.environ.update(RUNBOX_RUNBOXD=os.path.join(bin_dir(), "runboxd"), RUNBOX_HOST="http://127.0.0.1:1",
                      RUNBOX_TOKEN="", DOCKER_HOST=f"unix://{home}/no-docker.sock")
    yield runbox.local(os.path.join(bin_dir(), "runbox"), home=home)
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def workdir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="rbpylw", dir="/var/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module", params=["host", "local"])
def sb(request: pytest.FixtureRequest, lc: runbox.Local, workdir: str) -> Iterator[runbox.Sandbox]:
    try:
        s = lc.create(provider=request.param, workdir=workdir)
    except runbox.RunboxError as e:
        if request.param == "local" and os.environ.get("RUNBOX_REQUIRE_LOCAL") != "1":
            pytest.skip(f"this machine cannot make local sandboxes (RUNBOX_REQUIRE_LOCAL=1 makes it a failure): {e}")
        raise
    yield s
    s.remove(force=True)


def test_run(sb: runbox.Sandbox) -> None:
    res = sb.run("echo out; echo err >&2; exit 3", timeout=30)
    assert (res.exit_code, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert sb.run(["sh", "-c", "kill -9 $$"], timeout=30).exit_code == 137
    assert sb.run("cat", stdin="in\n", timeout=30).stdout == "in\n"
    res = sb.run("echo a; sleep 0.2; echo b >&2", timeout=30, merge_output=True)
    assert res.merged == "a\nb\n"


def test_timeout_kills_the_tree_and_the_next_command_works(sb: runbox.Sandbox) -> None:
    m = marker()
    res = sb.run(m.sh + "sleep $M & sleep $M", timeout=1)
    assert res.timed_out and count_procs(m) == 0
    assert sb.run("echo next", timeout=30).stdout == "next\n"


def test_stream_popen_files_sessions(sb: runbox.Sandbox) -> None:
    with sb.start("for i in 1 2 3; do echo $i; sleep 0.1; done", timeout=30) as p:
        assert "".join(c.text for c in p) == "1\n2\n3\n"
    again = sb.attach(p.id)
    assert again.wait().stdout == "1\n2\n3\n"
    pp = sb.popen("echo x; sleep 1000", stderr=runbox.STDOUT, timeout=60)
    assert pp.stdout.readline() == b"x\n"
    pp.kill()
    assert pp.wait(60) == -9 and pp.result.cancelled
    sb.files.write("sub/f.txt", "hello")
    assert sb.files.read_text("sub/f.txt") == "hello"
    assert sb.run("cat sub/f.txt", timeout=30).stdout == "hello"
    sb.run("export V=kept; cd sub", session="s", timeout=30)
    assert sb.run('echo "$V $(basename $PWD)"', session="s", timeout=30).stdout == "kept sub\n"


def test_get_list_and_not_found(lc: runbox.Local, sb: runbox.Sandbox) -> None:
    assert lc.get(sb.id).id == sb.id
    assert sb.id in [s.id for s in lc.list()]
    assert sb.refresh().state == "ready"
    with pytest.raises(runbox.SandboxNotFound):
        lc.get("nope-" + marker().replace(".", ""))


def test_wrong_secret_is_refused(sb: runbox.Sandbox) -> None:
    # The handshake is what opens the socket: a wrong secret gets nothing.
    t = sb.client._transport
    bad = Transport("http://localhost", "", unix_socket=t.unix_socket, secret=bytes(32))
    with pytest.raises(runbox.Unauthenticated):
        bad.unary("runbox.v1.RunboxService/List", {}, timeout=30)
    assert t.unary("runbox.v1.RunboxService/List", {}, timeout=30)[0] is not None


def test_async_local(lc: runbox.Local, sb: runbox.Sandbox) -> None:
    async def main() -> None:
        asb = await runbox.aio.AsyncLocal(lc.runbox, home=lc.home).get(sb.id)
        res = await asb.run("echo async", timeout=30)
        assert res.stdout == "async\n"
        async with await asb.start("echo 1; echo 2", timeout=30) as p:
            assert "".join([c.text async for c in p]) == "1\n2\n"

    asyncio.run(main())


def test_lost_sandbox(lc: runbox.Local, workdir: str) -> None:
    sb = lc.create(provider="host", workdir=workdir)
    m = marker()
    try:
        p = sb.start(m.sh + "echo up; sleep $M", timeout=60)
        it = iter(p)
        assert next(it).data == b"up\n"
        with open(os.path.join(sb.client._owner.home, "sandboxes", sb.id, "sandbox.json")) as f:  # type: ignore[union-attr]
            os.kill(int(json.load(f)["pid"]), signal.SIGKILL)
        with pytest.raises(runbox.SandboxLost):
            next(it)
        with pytest.raises(runbox.SandboxLost):
            sb.run("true", timeout=30)
        assert sb.refresh().state == "lost"
    finally:
        kill_procs(m)
        sb.remove(force=True)
    with pytest.raises(runbox.SandboxNotFound):
        lc.get(sb.id)


def test_cli_errors_have_their_class(lc: runbox.Local, workdir: str) -> None:
    with pytest.raises(runbox.InvalidSpec):
        lc.create(provider="host", workdir=workdir, memory="1G")  # the host provider cannot limit
    name = "py-" + marker().replace(".", "")
    sb = lc.create(provider="host", workdir=workdir, name=name)
    try:
        assert lc.get(name).id == sb.id
        with pytest.raises(runbox.AlreadyExists):
            lc.create(provider="host", workdir=workdir, name=name)
    finally:
        sb.remove()


def test_snapshot_and_fork_local_mode(lc: runbox.Local, sb: runbox.Sandbox) -> None:
    """Snapshots and forks in local mode go through the CLI: on the local
    provider, forks have the parent's files and their own writes; on the
    host provider, which cannot snapshot, the error is Unsupported. The
    server-only calls are Unsupported too, never an AttributeError."""
    with pytest.raises(runbox.Unsupported):
        sb.expose(8080)
    if sb.info.provider != "local":
        with pytest.raises(runbox.Unsupported):
            sb.snapshot()
        with pytest.raises(runbox.Unsupported):
            sb.fork(2)
        return
    m = marker()
    assert sb.run(f"mkdir -p /opt/pyfork && echo {m} > /opt/pyfork/given").exit_code == 0
    snap = sb.snapshot(no_workspace=True)
    assert snap.name and snap.sandbox_id == sb.id and snap.provider == "local" and not snap.workspace
    assert snap.name in [s.name for s in lc.snapshots()]
    forks = sb.fork(2, no_workspace=True)
    try:
        assert len(forks) == 2 and len({f.id for f in forks} | {sb.id}) == 3
        for f in forks:
            assert f.run(f"cat /opt/pyfork/given && echo {f.id} > /opt/pyfork/who").stdout.strip() == m
        for f in forks:
            assert f.run("cat /opt/pyfork/who").stdout.strip() == f.id
        assert sb.run("test -e /opt/pyfork/who").exit_code != 0
        made = lc.create(provider="local", from_snapshot=snap.name, workdir=tempfile.mkdtemp(prefix="rbpylf", dir="/var/tmp"))
        try:
            assert made.run("cat /opt/pyfork/given").stdout.strip() == m
        finally:
            made.remove(force=True)
    finally:
        for f in forks:
            f.remove(force=True)
    for s in lc.snapshots():
        lc.delete_snapshot(s.name)
    assert lc.snapshots() == []
