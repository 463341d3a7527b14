"""Streaming execs: chunks in order, cancel, signal, stdin, and re-attaching
after the connection drops or the server restarts, every chunk exactly once."""

from __future__ import annotations

import signal
from typing import List

import pytest
from conftest import Proxy, Server, count_procs, kill_procs, marker, wait_for

import runbox

LINES = 60
COUNT = f"for i in $(seq 1 {LINES}); do echo line $i; echo err $i >&2; sleep 0.05; done"
WANT_OUT = "".join(f"line {i}\n" for i in range(1, LINES + 1)).encode()
WANT_ERR = "".join(f"err {i}\n" for i in range(1, LINES + 1)).encode()


def check_exactly_once(chunks: List[runbox.Chunk]) -> None:
    seqs = [c.seq for c in chunks]
    assert seqs == sorted(set(seqs)), "chunks repeated or out of order"
    assert b"".join(c.data for c in chunks if c.stream == "stdout") == WANT_OUT
    assert b"".join(c.data for c in chunks if c.stream == "stderr") == WANT_ERR


def test_stream_chunks_in_order(sb: runbox.Sandbox) -> None:
    with sb.start(COUNT, timeout=120) as p:
        chunks = list(p)
    check_exactly_once(chunks)
    assert p.result is not None and p.result.exit_code == 0 and p.reconnects == 0
    assert p.result.stdout_raw == WANT_OUT and p.result.stderr_raw == WANT_ERR


def test_stream_with_cancel(sb: runbox.Sandbox) -> None:
    m = marker()
    p = sb.start(m.sh + "for i in $(seq 1 100000); do echo tick $i; sleep 0.02; done & sleep $M", timeout=300)
    got, cancelled = b"", False
    for chunk in p:
        got += chunk.data
        if b"tick 3\n" in got and not cancelled:
            wait_for("the sleep", lambda: count_procs(m) == 1)
            assert p.cancel() is True
            cancelled = True
    res = p.result
    assert res is not None and res.cancelled and not res.timed_out and res.exit_code == 143
    assert got.startswith(b"tick 1\ntick 2\ntick 3\n")
    assert count_procs(m) == 0
    assert p.cancel() is True  # idempotent


def test_signal_and_stdin_stream(sb: runbox.Sandbox) -> None:
    p = sb.start("trap 'echo got INT; exit 9' INT; read line; echo \"read $line\"; while :; do sleep 0.05; done",
                 timeout=120, stdin_stream=True)  # fmt: skip
    it = iter(p)
    p.write_stdin(b"hello\n")
    assert next(it).data == b"read hello\n"
    assert p.signal("SIGINT") >= 1
    rest = b"".join(c.data for c in it)
    assert rest == b"got INT\n"
    assert p.result is not None and p.result.exit_code == 9


def test_context_manager_cancels_on_error(sb: runbox.Sandbox) -> None:
    m = marker()
    with pytest.raises(RuntimeError):
        with sb.start(m.sh + "sleep $M", timeout=300) as p:
            wait_for("the sleep", lambda: count_procs(m) == 1)
            raise RuntimeError("the caller failed")
    wait_for("the exec to be stopped", lambda: count_procs(m) == 0)
    res = sb.attach(p.id).wait()
    assert res.cancelled


def test_reattach_after_the_connection_drops(server: Server, proxy: Proxy) -> None:
    """The connection is cut (both ends reset) mid-stream, twice: the
    Process re-attaches through the proxy by itself, every chunk arrives
    exactly once, and the command ran once."""
    c = runbox.Client(proxy.url, server.token())
    with c.create(provider="host") as sb:
        p = sb.start(f"echo run >> runs; {COUNT}", timeout=120)
        chunks: List[runbox.Chunk] = []
        for chunk in p:
            chunks.append(chunk)
            if len(chunks) in (10, 50):
                proxy.drop()
        check_exactly_once(chunks)
        assert p.reconnects >= 2 and not p.gaps
        assert p.result is not None and p.result.exit_code == 0
        assert sb.files.read("runs") == b"run\n"


def test_reattach_after_refused_connections(server: Server, proxy: Proxy) -> None:
    """While the server cannot be reached at all, the Process keeps trying
    within its reconnect window, then catches up exactly once."""
    c = runbox.Client(proxy.url, server.token())
    direct = server.client()
    with c.create(provider="host") as sb:
        p = sb.start(COUNT.replace("sleep", "echo $i >> progress; sleep"), timeout=120)
        it = iter(p)
        chunks = [next(it) for _ in range(5)]
        proxy.paused = True
        proxy.drop()
        accepted = proxy.accepted
        # The command gets ahead while nothing can connect (read by another
        # client, straight from the server).
        wait_for("more output", lambda: len(direct.get(sb.id).files.read("progress").split()) > 20)
        proxy.paused = False
        chunks.extend(it)
        check_exactly_once(chunks)
        assert proxy.accepted > accepted and p.reconnects >= 1


def test_close_and_attach_from_a_sequence_number(sb: runbox.Sandbox) -> None:
    p = sb.start(COUNT, timeout=120)
    first: List[runbox.Chunk] = []
    for chunk in p:
        first.append(chunk)
        if len(first) == 7:
            break
    p.close()  # the exec runs on without a reader
    q = sb.attach(p.id, from_seq=p.last_seq + 1)
    assert q.attached and q.id == p.id
    check_exactly_once(first + list(q))
    assert q.result is not None and q.result.exit_code == 0
    # Re-attaching to a finished exec replays its output and its result.
    again = sb.attach(p.id, from_seq=1)
    check_exactly_once(list(again))


def test_start_with_an_existing_id_attaches(sb: runbox.Sandbox) -> None:
    p = sb.start(f"echo once >> runs; {COUNT}", timeout=120, id="py-same")
    q = sb.start(f"echo once >> runs; {COUNT}", timeout=120, id="py-same")
    assert q.attached
    check_exactly_once(list(q))
    assert p.wait().exit_code == 0
    assert sb.files.read("runs") == b"once\n"


def test_stream_survives_a_server_restart(fresh_server: Server) -> None:
    """runbox serve is killed with SIGKILL mid-stream and started again on
    the same port: the Process re-attaches to the next server, and the
    output is complete and exactly once."""
    c = fresh_server.client()
    with c.create(provider="host") as sb:
        p = sb.start(COUNT, timeout=120)
        chunks: List[runbox.Chunk] = []
        for chunk in p:
            chunks.append(chunk)
            if len(chunks) == 10:
                fresh_server.stop(signal.SIGKILL)
                fresh_server.start()
        check_exactly_once(chunks)
        assert p.reconnects >= 1
        assert p.result is not None and p.result.exit_code == 0


def test_gap_when_the_ring_moved_on(sb: runbox.Sandbox) -> None:
    """A reader away for longer than the replay ring holds (1 MiB a stream)
    is told what it missed, as a Gap, and the counts add up."""
    total = 4_000_000
    p = sb.start(f"yes | head -c {total}", timeout=120)
    first = next(iter(p))
    p.close()
    wait_for("the exec to end", lambda: sb.execs()[0].state == "exited")
    q = sb.attach(p.id, from_seq=p.last_seq + 1)
    rest = list(q)
    assert q.gaps and q.result is not None and q.result.stream_gaps == len(q.gaps)
    assert q.gaps[0].from_seq == first.seq + 1 and rest[0].seq == q.gaps[-1].to_seq
    # From the start, the stream knows how many bytes the gap held.
    r = sb.attach(p.id)
    replay = list(r)
    assert r.result is not None and r.result.stream_lost == sum(g.bytes for g in r.gaps) > 0
    assert sum(len(c.data) for c in replay) + r.result.stream_lost == total == r.result.stdout_bytes
    assert [c.seq for c in replay] == [c.seq for c in rest]


def test_execs_without_output(sb: runbox.Sandbox) -> None:
    """execs(omit_output=True) leaves each result's stdout and stderr out
    and keeps everything else; the default keeps them."""
    r = sb.run("printf 'out %s' $RANDOM; printf err-text >&2; exit 3")
    full = next(e for e in sb.execs() if e.id == r.id)
    assert full.result is not None and full.result.stdout == r.stdout and full.result.stderr == "err-text"
    bare = next(e for e in sb.execs(omit_output=True) if e.id == r.id)
    assert bare.result is not None and bare.result.stdout == "" and bare.result.stderr == ""
    assert bare.result.exit_code == 3 == full.result.exit_code
    assert bare.result.stdout_bytes == len(r.stdout) and bare.result.stderr_bytes == len("err-text")
