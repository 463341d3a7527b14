"""The exec matrix through Python against a real runbox serve: exit codes,
exact output, stdin, timeouts, killed trees, lost sandboxes, interrupts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import PKG_DIR, WAIT, Server, count_procs, kill_procs, marker, runboxd_pid, wait_for

import runbox


@pytest.mark.parametrize("code", [0, 1, 3, 42])
def test_exit_codes(sb: runbox.Sandbox, code: int) -> None:
    res = sb.run(f"exit {code}", timeout=30)
    assert res.exit_code == code
    assert not res.timed_out and not res.cancelled and res.signal == ""
    assert res.ok == (code == 0)


def test_argv_runs_without_a_shell(sb: runbox.Sandbox) -> None:
    res = sb.run(["printf", "%s|", "a b", "$HOME", "*"], timeout=30)
    assert res.stdout_raw == b"a b|$HOME|*|"


def test_stdout_and_stderr_are_separate_and_exact(sb: runbox.Sandbox) -> None:
    res = sb.run(r"printf 'out\000\377 1\n'; printf 'err 1\n' >&2; printf 'out 2'; printf '\351rr 2' >&2", timeout=30)
    assert res.stdout_raw == b"out\x00\xff 1\nout 2"
    assert res.stderr_raw == b"err 1\n\xe9rr 2"
    assert res.stdout_bytes == len(res.stdout_raw) and res.stderr_bytes == len(res.stderr_raw)
    assert res.stdout == "out\x00\ufffd 1\nout 2"  # text: invalid UTF-8 replaced
    assert res.stdout_dropped == 0 and res.stderr_dropped == 0


def test_head_and_tail_count_what_they_drop(sb: runbox.Sandbox) -> None:
    res = sb.run("head -c 100000 /dev/zero | tr '\\0' x", timeout=30, head_bytes=1000, tail_bytes=500)
    assert res.stdout_raw == b"x" * 1500
    assert res.stdout_dropped == 100000 - 1500 and res.stdout_bytes == 100000


def test_stdin_bytes(sb: runbox.Sandbox) -> None:
    data = bytes(range(256)) * 300 + b"\x00end"
    res = sb.run("cat; echo; wc -c >&2", stdin=data, timeout=30, head_bytes=1 << 20)
    assert res.stdout_raw == data + b"\n"
    res = sb.run("wc -c", stdin=data, timeout=30)
    assert res.stdout.strip() == str(len(data))


def test_stdin_is_closed_by_default(sb: runbox.Sandbox) -> None:
    res = sb.run("cat > f; wc -c < f", timeout=30)  # never waits for input
    assert res.exit_code == 0 and res.stdout.strip() == "0" and not res.timed_out


def test_env_cwd_and_session(sb: runbox.Sandbox) -> None:
    res = sb.run("mkdir -p sub && cd sub && pwd", timeout=30)
    sub = res.stdout.strip()
    assert sb.run("pwd", cwd=sub, timeout=30).stdout.strip() == sub
    assert sb.run("echo $A-$B", env={"A": "1", "B": "two"}, timeout=30).stdout == "1-two\n"
    sb.run("cd sub && export X=kept", session="s", timeout=30)
    res = sb.run('echo "$(pwd) $X"', session="s", timeout=30)
    assert res.stdout == f"{sub} kept\n"
    sb.delete_session("s")


def test_wedge_returns_at_its_timeout(sb: runbox.Sandbox) -> None:
    """A command that never ends (a busy loop, a sleep) returns at its
    timeout as a result, stopped by SIGTERM."""
    m = marker()
    for cmd in ["while :; do :; done", f"sleep {m}"]:
        res = sb.run(cmd, timeout=1)
        assert res.timed_out and res.exit_code == 143 and res.signal == "TERM"
        assert 1.0 <= res.duration
    assert count_procs(m) == 0


def test_background_child_holding_the_pipe_does_not_hang(sb: runbox.Sandbox) -> None:
    """The leader exits; a child it left running keeps stdout open. The
    call returns with the leader's status, not at a timeout."""
    m = marker()
    try:
        res = sb.run(f"sleep {m} & echo started; exit 7", timeout=120)
        assert res.exit_code == 7 and res.stdout == "started\n" and not res.timed_out
        assert count_procs(m) == 1  # background children live on (design rule 5)
    finally:
        kill_procs(m)


def test_timeout_kills_every_descendant(sb: runbox.Sandbox) -> None:
    m = marker()
    cmd = m.sh + "sleep $M & sleep $M & (sleep $M &) & setsid sleep $M & nohup sleep $M >/dev/null 2>&1 & sleep $M"
    p = sb.start(cmd, timeout=60)
    wait_for("six sleeps", lambda: count_procs(m) == 6)
    p.cancel()
    res = p.wait()
    assert res.cancelled and res.exit_code == 143
    assert res.killed >= 6
    assert count_procs(m) == 0  # checked on this machine's /proc, not the server's word

    res = sb.run(cmd, timeout=1)
    assert res.timed_out and res.killed >= 6 and res.survivors == 0
    assert count_procs(m) == 0


def test_term_ignoring_tree_is_killed_137(sb: runbox.Sandbox) -> None:
    m = marker()
    cmd = m.sh + "trap '' TERM; sh -c 'trap \"\" TERM; sleep $M' & sleep $M & while :; do sleep 0.1; done"
    res = sb.run(cmd, timeout=1, grace=1)
    assert res.timed_out and res.exit_code == 137 and res.signal == "KILL"
    assert res.survivors == 0
    assert count_procs(m) == 0

    p = sb.start(cmd, timeout=120, grace=1)
    wait_for("two TERM-ignoring sleeps", lambda: count_procs(m) == 2)
    p.cancel()
    res = p.wait()
    assert res.cancelled and res.exit_code == 137 and res.signal == "KILL" and res.killed >= 3
    assert count_procs(m) == 0


def test_timeout_path_the_servers_deadline_wins(server: Server) -> None:
    """The call's own deadline is timeout + grace + headroom: a command that
    ignores SIGTERM ends at timeout + grace, after timeout + headroom, and
    is still a timed-out Result, not a client-side timeout. (Computing the
    deadline without grace fails this test with DeadlineExceeded.)"""
    c = server.client(headroom=3.0)
    with c.create(provider="host") as sb:
        res = sb.run("trap '' TERM; while :; do sleep 0.1; done", timeout=1, grace=3)
        assert res.timed_out and res.exit_code == 137
        assert res.duration >= 4.0


def test_lost_sandbox_raises_sandbox_lost(server: Server, client: runbox.Client) -> None:
    sb = client.create(provider="host")
    try:
        assert sb.run("true", timeout=30).exit_code == 0
        os.kill(runboxd_pid(server, sb), signal.SIGKILL)
        with pytest.raises(runbox.SandboxLost) as e:
            sb.run("echo never", timeout=30)
        assert e.value.tag == "sandbox-lost" and e.value.code == "unavailable"
        wait_for("lost state", lambda: sb.refresh().state == "lost")
        assert sb.info.lost_reason
        with pytest.raises(runbox.SandboxLost):
            sb.start("echo never", timeout=30)
        with pytest.raises(runbox.FailedPrecondition):
            sb.remove()  # a lost sandbox needs force
    finally:
        sb.remove(force=True)


def test_lost_during_a_stream(server: Server, client: runbox.Client) -> None:
    m = marker()
    sb = client.create(provider="host")
    try:
        p = sb.start(f"echo up; sleep {m}", timeout=120)
        it = iter(p)
        assert next(it).data == b"up\n"
        os.kill(runboxd_pid(server, sb), signal.SIGKILL)
        with pytest.raises(runbox.SandboxLost):
            next(it)
    finally:
        kill_procs(m)
        sb.remove(force=True)


def test_recreate_replaces_a_lost_sandbox(server: Server, client: runbox.Client) -> None:
    with client.create(provider="host", recreate=True) as sb:
        sb.files.write("mark", "old")
        os.kill(runboxd_pid(server, sb), signal.SIGKILL)
        res = sb.run("ls mark 2>&1; echo fresh", timeout=30)
        assert res.recreated and res.stdout.endswith("fresh\n")
        assert sb.refresh().recreated == 1


def test_recreate_is_reported_on_a_streamed_exec(server: Server, client: runbox.Client) -> None:
    # The server says so in the stream's Runbox-Sandbox-Recreated header:
    # the Result of start().wait() must carry it, as run()'s does.
    with client.create(provider="host", recreate=True) as sb:
        os.kill(runboxd_pid(server, sb), signal.SIGKILL)
        p = sb.start("echo fresh", timeout=30)
        res = p.wait()
        assert res.recreated and res.stdout == "fresh\n"
        assert p.recreated
        assert p.result is not None and p.result.recreated
        assert not sb.start("true", timeout=30).wait().recreated  # only the first
        assert sb.refresh().recreated == 1


INTERRUPTED = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {sdk!r})
    import runbox
    sb = runbox.Client({url!r}, {token!r}).get({sb!r})
    try:
        sb.run("sleep " + {head!r} + {tail!r}, id={id!r})  # the marker is not in this cmdline
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
    """
)


def test_keyboard_interrupt_cancels_the_exec(server: Server, sb: runbox.Sandbox) -> None:
    m = marker()
    exec_id = "py-interrupted-" + m.replace(".", "-")
    script = INTERRUPTED.format(
        sdk=PKG_DIR, url=server.url, token=server.token(), sb=sb.id, head=m[:3], tail=m[3:], id=exec_id
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        wait_for("the command to run", lambda: count_procs(m) == 1)
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=WAIT)
        assert child.returncode == 130 and out == "interrupted\n"
        # The exec was cancelled in the sandbox: its process is gone, and
        # its result says so.
        wait_for("the command to be stopped", lambda: count_procs(m) == 0)
        res = sb.attach(exec_id, stream_output=False).wait()
        assert res.cancelled and res.exit_code == 143
    finally:
        child.kill()
        kill_procs(m)


def test_pause_and_resume(sb: runbox.Sandbox) -> None:
    """A paused sandbox refuses new execs with SandboxPaused, a running
    exec's timeout does not count the pause, and resume lets it finish."""
    import time

    p = sb.start("sleep 1; echo done", timeout=2)
    sb.pause()
    sb.pause()  # idempotent
    assert sb.paused()
    with pytest.raises(runbox.SandboxPaused) as e:
        sb.run("true", timeout=10)
    assert e.value.tag == "sandbox-paused"
    time.sleep(3)  # past the exec's timeout, on the wall clock
    sb.resume()
    sb.resume()
    assert not sb.paused()
    res = p.wait()
    assert not res.timed_out and res.stdout == "done\n"
