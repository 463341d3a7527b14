"""Every exception class, raised from a real server's answer (unary and
streaming), chosen by the Runbox-Error tag and the code, never the text."""

from __future__ import annotations

import os
import signal
import socket

import pytest
from conftest import Server, runboxd_pid

import runbox
from runbox import errors


def raises(cls: type, call, tag: str = "", code: str = "") -> runbox.RunboxError:
    with pytest.raises(cls) as e:
        call()
    assert type(e.value) is cls, f"{type(e.value).__name__}: {e.value}"
    if tag:
        assert e.value.tag == tag
    if code:
        assert e.value.code == code
    return e.value


def test_control_plane_errors(server: Server, client: runbox.Client) -> None:
    raises(runbox.Unauthenticated, lambda: runbox.Client(server.url, "rbx_unknown").list(), "unauthenticated", "unauthenticated")
    raises(runbox.SandboxNotFound, lambda: client.get("sb-000000000000"), "sandbox-not-found", "not_found")
    raises(runbox.SandboxNotFound, lambda: client.remove("no-such-name"), "sandbox-not-found")
    raises(runbox.InvalidSpec, lambda: client.create(provider="no-such-provider"), "invalid-spec", "invalid_argument")
    raises(runbox.InvalidSpec, lambda: client.create(provider="host", idle_ttl=-1), "invalid-spec")
    # Malformed JSON (an unknown field) is refused by the decoder: no tag.
    raises(runbox.InvalidArgument, lambda: client._call("Create", {"spec": {"timeout": 5}}), "", "invalid_argument")
    with client.create(provider="host", name="taken"):
        raises(runbox.AlreadyExists, lambda: client.create(provider="host", name="taken"), "", "already_exists")


def test_quota_exceeded(server: Server) -> None:
    c = runbox.Client(server.url, server.token("quota", "--max-sandboxes", "1"))
    with c.create(provider="host"):
        e = raises(runbox.QuotaExceeded, lambda: c.create(provider="host"), "quota-exceeded", "resource_exhausted")
        assert e.http_status == 429 and isinstance(e, runbox.ResourceExhausted)


def test_tenants_do_not_see_each_other(server: Server, sb: runbox.Sandbox) -> None:
    other = runbox.Client(server.url, server.token("other-tenant"))
    raises(runbox.SandboxNotFound, lambda: other.get(sb.id))
    stranger = runbox.Sandbox(other, sb.info)
    raises(runbox.SandboxNotFound, lambda: stranger.run("true"))
    raises(runbox.SandboxNotFound, lambda: stranger.start("true"))  # a streaming answer
    raises(runbox.SandboxNotFound, lambda: stranger.files.read("x"))


def test_exec_errors(sb: runbox.Sandbox) -> None:
    raises(runbox.InvalidSpec, lambda: sb.run("true", timeout=-1), "invalid-spec")
    raises(runbox.InvalidSpec, lambda: sb.start("true", timeout=-1), "invalid-spec")
    raises(runbox.TooLarge, lambda: sb.run("x" * ((1 << 20) + 1)), "too-large", "resource_exhausted")
    # A message over 7 MiB is refused before it is read: untagged.
    raises(runbox.TooLarge, lambda: sb.run("cat", stdin=b"x" * (8 << 20)), "", "resource_exhausted")
    raises(runbox.SpawnError, lambda: sb.run("true", cwd="/nonexistent"), "spawn", "failed_precondition")
    raises(runbox.SpawnError, lambda: sb.start(["/nonexistent/program"]), "spawn")
    raises(runbox.ExecNotFound, lambda: sb.signal("py-nope", "TERM"), "exec-not-found", "not_found")
    raises(runbox.ExecNotFound, lambda: sb.attach("py-nope"), "exec-not-found")  # streaming
    raises(runbox.SessionNotFound, lambda: sb.delete_session("nope"), "session-not-found")

    assert sb.cancel("py-tombstone") is False  # unknown: a tombstone
    raises(runbox.ExecCancelled, lambda: sb.run("true", id="py-tombstone"), "cancelled", "failed_precondition")
    raises(runbox.ExecCancelled, lambda: sb.start("true", id="py-tombstone"), "cancelled")

    assert sb.run("true", id="py-once").exit_code == 0
    raises(runbox.ExecIDConflict, lambda: sb.run("false", id="py-once"), "exec-id-conflict", "already_exists")
    raises(runbox.NotRunning, lambda: sb.signal("py-once", "TERM"), "not-running", "failed_precondition")
    raises(runbox.NotRunning, lambda: sb.attach("py-once").write_stdin(b"x"), "not-running")
    # Shutdown is not for tenants: permission_denied without a tag.
    raises(runbox.PermissionDenied, lambda: sb._exec_call("Shutdown", {}), "", "permission_denied")
    raises(runbox.InvalidArgument, lambda: sb.signal("py-once", "SIGNOPE"))  # the SDK's own, before sending


def test_file_errors(sb: runbox.Sandbox) -> None:
    sb.files.write("file", "x")
    raises(runbox.FileNotFound, lambda: sb.files.read("missing"), "file-not-found", "not_found")  # streaming
    raises(runbox.FileNotFound, lambda: sb.files.stat("missing"), "file-not-found")  # unary
    raises(runbox.IsDirectory, lambda: sb.files.read("."), "is-directory", "failed_precondition")
    raises(runbox.NotDirectory, lambda: sb.files.list("file"), "not-directory", "failed_precondition")
    raises(runbox.NotDirectory, lambda: sb.files.mkdir("file/sub"), "not-directory")
    raises(runbox.EscapesRoot, lambda: sb.files.read("../x", root="/tmp"), "escapes-root", "permission_denied")
    raises(runbox.InvalidPath, lambda: sb.files.read("a\x00b"), "invalid-path", "invalid_argument")
    raises(runbox.InvalidPath, lambda: sb.files.mkdir("a\x00b"), "invalid-path")
    # The daemon's own failure that is none of the sentinels: tag internal.
    raises(runbox.InternalError, lambda: sb.files.write("/proc/version", "x", in_place=True), "internal")
    # chattr +i: even root may not replace the file.
    if sb.run("echo x > locked && chattr +i locked", timeout=30).exit_code != 0:
        if os.environ.get("RUNBOX_REQUIRE_PYTHON") == "1":
            pytest.fail("chattr +i failed: CI installs e2fsprogs, and the workspace must be on ext4 or xfs")
        pytest.skip("chattr +i does not work here (install e2fsprogs; the workspace needs ext4 or xfs)")
    try:
        raises(runbox.FilePermission, lambda: sb.files.write("locked", "y"), "permission", "permission_denied")
        raises(runbox.FilePermission, lambda: sb.files.remove("locked"), "permission")
    finally:
        sb.run("chattr -i locked", timeout=30)


def test_sandbox_lost_class(server: Server, client: runbox.Client) -> None:
    sb = client.create(provider="host")
    try:
        os.kill(runboxd_pid(server, sb), signal.SIGKILL)
        e = raises(runbox.SandboxLost, lambda: sb.run("true"), "sandbox-lost", "unavailable")
        assert e.http_status == 503
        raises(runbox.SandboxLost, lambda: sb.files.read("x"), "sandbox-lost")
    finally:
        sb.remove(force=True)


def test_unavailable_when_the_server_shuts_down(fresh_server: Server) -> None:
    """A stream the server ends because it is shutting down answers
    unavailable without a tag: the SDK re-attaches after such an answer
    (seen here on the raw stream, which does not)."""
    c = fresh_server.client()
    sb = c.create(provider="host")
    p = sb.start("sleep 600", timeout=600)
    stream = c._transport.server_stream(
        "runbox.v1.RunboxService/Attach", {"id": p.id}, headers={"Runbox-Sandbox": sb.id}, timeout=60
    )
    assert "started" in next(stream)
    assert fresh_server.proc is not None
    fresh_server.proc.send_signal(signal.SIGTERM)
    e = raises(runbox.Unavailable, lambda: next(stream), "", "unavailable")
    assert e.http_status == 200  # Connect streams carry errors in their last message
    p.close()
    fresh_server.proc.wait(60)
    fresh_server.proc = None
    fresh_server.start()
    assert sb.cancel(p.id) is True
    sb.remove()


def test_unavailable_and_deadline_of_the_sdk(server: Server) -> None:
    """The SDK's own: no server on the port (Unavailable, nothing sent), and
    a server that accepts but never answers (DeadlineExceeded)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(runbox.Unavailable) as e:
        runbox.Client(f"http://127.0.0.1:{port}", "t").list()
    assert e.value.code == "unavailable" and e.value.http_status is None
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    try:
        c = runbox.Client("http://127.0.0.1:%d" % silent.getsockname()[1], "t", timeout=0.5)
        raises(runbox.DeadlineExceeded, c.list, "", "deadline_exceeded")
    finally:
        silent.close()


@pytest.mark.parametrize("tag,cls", sorted(errors._BY_TAG.items()))
def test_every_tag_has_its_class(tag: str, cls: type) -> None:
    assert type(errors.from_wire("unknown", "m", tag)) is cls
    # The tag decides, whatever the code (the message is never read).
    assert type(errors.from_wire("internal", "sandbox lost", tag)) is cls


def test_untagged_errors_by_code() -> None:
    assert type(errors.from_wire("not_found", "no such sandbox")) is runbox.NotFound
    assert type(errors.from_wire("unavailable", "sandbox-lost")) is runbox.Unavailable
    assert type(errors.from_wire("resource_exhausted", "")) is runbox.TooLarge
    assert type(errors.from_wire("no_such_code", "")) is runbox.InternalError
    assert type(errors.from_wire("not_found", "", "a-future-tag")) is runbox.NotFound


def test_every_class_is_exported() -> None:
    for name in errors.__all__:
        assert getattr(runbox, name) is getattr(errors, name)
