"""The framework authors' surface: Popen, cancel(wait=True), merged output."""

from __future__ import annotations

import os
import random
import select
import subprocess
import time

import pytest
from conftest import count_procs, kill_procs, marker, wait_for

import runbox


def test_merged_output_in_order(sb: runbox.Sandbox) -> None:
    cmd = "echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c; sleep 0.2; echo d >&2"
    res = sb.run(cmd, timeout=30, merge_output=True)
    assert res.merged == "a\nb\nc\nd\n" and res.output == res.merged
    assert res.stdout == "a\nc\n" and res.stderr == "b\nd\n"
    with sb.start(cmd, timeout=30, merge_output=True) as p:
        res = p.wait()
    assert res.merged_raw == b"a\nb\nc\nd\n"
    # Without the option: stdout then stderr, no merged bytes.
    plain = sb.run(cmd, timeout=30)
    assert plain.merged_raw is None and plain.output == "a\nc\nb\nd\n"


def test_merged_output_keeps_head_and_tail(sb: runbox.Sandbox) -> None:
    res = sb.run("head -c 100000 /dev/zero | tr '\\0' x; sleep 0.3; echo END >&2", timeout=30,
                 merge_output=True, head_bytes=1000, tail_bytes=1000)
    assert len(res.merged_raw or b"") == 2000 and res.merged_dropped == 100004 - 2000
    assert res.merged.endswith("xEND\n")


def test_cancel_wait_returns_the_result(sb: runbox.Sandbox) -> None:
    m = marker()
    p = sb.start(m.sh + "echo up; sleep $M & sleep $M", timeout=60)
    assert next(iter(p)).data == b"up\n"
    res = p.cancel(wait=True)
    assert isinstance(res, runbox.Result) and res.cancelled and p.done
    assert count_procs(m) == 0


def test_popen_pipes_poll_wait(sb: runbox.Sandbox) -> None:
    p = sb.popen("echo out; echo err >&2; exit 7", timeout=30)
    assert isinstance(p.stdout.fileno(), int) and isinstance(p.stderr.fileno(), int)
    assert p.stdout.read() == b"out\n" and p.stderr.read() == b"err\n"
    assert p.wait(timeout=60) == 7 and p.poll() == 7 and p.returncode == 7
    assert p.result is not None and p.result.exit_code == 7
    # Text mode, merged in order, communicate.
    with sb.popen("echo 1; sleep 0.2; echo 2 >&2", stderr=runbox.STDOUT, text=True, timeout=30) as p:
        assert p.stderr is None
        assert p.communicate() == ("1\n2\n", None)
    assert p.returncode == 0


def test_popen_wait_timeout_then_kill_stops_the_tree(sb: runbox.Sandbox) -> None:
    m = marker()
    p = sb.popen(m.sh + "sleep $M & sleep $M & echo started; wait", timeout=120)
    # A framework polls and reads without blocking.
    os.set_blocking(p.stdout.fileno(), False)
    r, _, _ = select.select([p.stdout], [], [], 60)
    assert r and p.stdout.read() == b"started\n"
    assert p.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=0.1)
    wait_for("the sleeps", lambda: count_procs(m) == 2)
    p.kill()
    assert p.wait(timeout=60) == -9 and p.result.cancelled
    assert count_procs(m) == 0
    assert p.stdout.read() == b""  # end of file


def test_popen_terminate_and_signal(sb: runbox.Sandbox) -> None:
    p = sb.popen("trap 'echo got INT; exit 3' INT; echo ready; while :; do sleep 0.05; done", timeout=60)
    assert p.stdout.readline() == b"ready\n"
    p.send_signal("INT")
    assert p.wait(timeout=60) == 3 and p.stdout.read() == b"got INT\n"
    p = sb.popen("sleep 1000", timeout=60)
    p.terminate()
    assert p.wait(timeout=60) == -15 and p.result.cancelled


def test_popen_background_child_holding_the_pipe(sb: runbox.Sandbox) -> None:
    m = marker()
    try:
        p = sb.popen(m.sh + "sleep $M & echo done", timeout=60)
        # The pipe ends with the exec, though the sleep holds its stdout.
        assert p.stdout.read() == b"done\n" and p.wait(timeout=60) == 0
    finally:
        kill_procs(m)


def test_popen_stdin_pipe(sb: runbox.Sandbox) -> None:
    p = sb.popen("tr a-z A-Z", stdin=runbox.PIPE, timeout=30)
    out, err = p.communicate(b"hello\n")
    assert out == b"HELLO\n" and err == b"" and p.returncode == 0
    p = sb.popen("cat", stdin="given\n", stdout=runbox.PIPE, stderr=runbox.DEVNULL, timeout=30)
    assert p.stderr is None and p.communicate() == (b"given\n", None)


def test_popen_killed_at_random_moments_stops_the_tree(sb: runbox.Sandbox) -> None:
    for _ in range(15):
        m = marker()
        p = sb.popen(m.sh + "sleep $M & echo up; sleep $M", timeout=600, stderr=runbox.STDOUT)
        time.sleep(random.uniform(0, 0.05))
        p.kill()
        assert p.wait(timeout=120) == -9 and p.result is not None and p.result.cancelled
        assert p.stdout.read() in (b"", b"up\n")
        wait_for("the tree to be gone", lambda: count_procs(m) == 0)


def test_popen_kill_then_wait_with_a_full_pipe(sb: runbox.Sandbox) -> None:
    # The caller reads nothing: the pipe fills; kill() then wait() must not
    # hang on it (as with subprocess, where the killed child stops writing).
    p = sb.popen("head -c 1000000 /dev/zero; sleep 1000", timeout=600)
    wait_for("the output to fill the pipe", lambda: p.process.last_seq > 0)
    p.kill()
    assert p.wait(timeout=120) == -9 and p.result is not None and p.result.cancelled
    assert 0 < len(p.stdout.read()) < 1000000
