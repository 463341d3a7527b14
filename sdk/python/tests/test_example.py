"""examples/python/terminal_backend.py: an agent framework's terminal
backend shape on top of the SDK, against the real server."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from typing import Iterator

import pytest
from conftest import REPO, Server, count_procs, kill_procs, marker, runboxd_pid, wait_for

import runbox

EXAMPLE = os.path.join(REPO, "examples", "python", "terminal_backend.py")


@pytest.fixture
def env(server: Server) -> Iterator[object]:
    spec = importlib.util.spec_from_file_location("terminal_backend", EXAMPLE)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    e = mod.RunboxEnvironment(timeout=60, client=server.client(), provider="host")
    yield e
    e.cleanup()


def test_execute_shape(env) -> None:  # type: ignore[no-untyped-def]
    assert env.execute("echo hi") == {"output": "hi\n", "returncode": 0}
    assert env.execute("exit 42")["returncode"] == 42
    # stdout and stderr merged in the order read (pauses make it certain).
    out = env.execute("echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c")
    assert out == {"output": "a\nb\nc\n", "returncode": 0}
    assert env.execute("cat", stdin_data="some input\n")["output"] == "some input\n"
    assert env.execute("pwd", cwd="/tmp")["output"] == "/tmp\n"
    big = env.execute("head -c 200000 /dev/zero | tr '\\0' x")["output"]
    assert len(big) < 60_000 and "characters left out" in big


def test_execute_timeout_kills_the_tree_and_the_sandbox_lives(env) -> None:  # type: ignore[no-untyped-def]
    m = marker()
    out = env.execute(m.sh + "echo started; sleep $M & sleep $M", timeout=1)
    assert out["returncode"] == 124 and out["output"] == "started\n\n[Command timed out after 1s]"
    assert count_procs(m) == 0
    assert env.execute("echo still here") == {"output": "still here\n", "returncode": 0}


def test_execute_background_child_holding_the_pipe(env) -> None:  # type: ignore[no-untyped-def]
    m = marker()
    # The sleep keeps the command's stdout open; the call ends with the shell.
    assert env.execute(m.sh + "sleep $M & echo done") == {"output": "done\n", "returncode": 0}
    assert count_procs(m) == 1
    kill_procs(m)


def test_execute_interrupt_kills_the_tree(env) -> None:  # type: ignore[no-untyped-def]
    m = marker()
    threading.Thread(target=lambda: (wait_for("the sleeps", lambda: count_procs(m) == 2), env.interrupt()),
                     daemon=True).start()
    out = env.execute(m.sh + "echo started; sleep $M & sleep $M", timeout=600)
    assert out == {"output": "started\n\n[Command interrupted]", "returncode": 130}
    assert count_procs(m) == 0
    assert env.execute("echo next") == {"output": "next\n", "returncode": 0}


def test_execute_env_and_cwd_persist(env) -> None:  # type: ignore[no-untyped-def]
    assert env.execute("export GREETING=hi; mkdir -p sub; cd sub")["returncode"] == 0
    out = env.execute('echo "$GREETING"; basename "$PWD"')
    assert out == {"output": "hi\nsub\n", "returncode": 0}


def test_execute_lost_sandbox_raises_then_recreates(server: Server, env) -> None:  # type: ignore[no-untyped-def]
    os.kill(runboxd_pid(server, env.sandbox), signal.SIGKILL)
    # The Process sees the connection to runboxd fail; the server's next
    # answer says lost, or recreates it before the command runs.
    try:
        out = env.execute("echo fresh")
    except runbox.SandboxLost:
        out = env.execute("echo fresh")
    assert out == {"output": "fresh\n", "returncode": 0}
    assert env.sandbox.refresh().recreated == 1


def test_example_main_runs(server: Server) -> None:
    e = dict(os.environ, RUNBOX_HOST=server.url, RUNBOX_TOKEN=server.token())
    # The example uses the server's default provider (host, here).
    out = subprocess.run([sys.executable, EXAMPLE], env=e, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # Two pipes: the order between stdout and stderr is the order read.
    assert lines[0] in (
        "echo hello; echo oops >&2; exit 3 -> {'output': 'hello\\noops\\n', 'returncode': 3}",
        "echo hello; echo oops >&2; exit 3 -> {'output': 'oops\\nhello\\n', 'returncode': 3}",
    )
    assert "'returncode': 124" in out.stdout and "{'output': 'from stdin\\n', 'returncode': 0}" in out.stdout
    assert lines[-1] == "echo $X -> {'output': '1\\n', 'returncode': 0}"
