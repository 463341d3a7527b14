"""A sandbox of a runbox server: run commands in it, stream them, move files."""

from __future__ import annotations

import base64
import enum
import math
import secrets
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from . import errors
from ._connect import ConnectionLost, ServerStream
from .files import Files
from .models import ExecInfo, ExposedPort, Result, SandboxInfo, Snapshot
from ._follow import merge_buffer
from .process import Process, _transient

if TYPE_CHECKING:  # pragma: no cover
    from .client import Client
    from .popen import Popen

__all__ = ["Sandbox", "DEFAULT_GRACE"]

#: The stop protocol's default time between SIGTERM and SIGKILL, seconds.
DEFAULT_GRACE = 5.0

# Linux's signal numbers (the sandbox's), whatever this machine's are.
_SIGNALS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7,
    "FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13,
    "ALRM": 14, "TERM": 15, "STKFLT": 16, "CHLD": 17, "CONT": 18, "STOP": 19,
    "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25,
    "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "PWR": 30, "SYS": 31,
}  # fmt: skip

Command = Union[str, Sequence[str]]

# Calls that may be repeated after a broken connection: doing them twice
# has the effect of doing them once.
_REPEATABLE = {"Cancel", "List", "Info", "ListSessions", "Stat", "ListDir", "Pause", "Resume"}


def new_exec_id() -> str:
    """Returns a fresh exec id. The SDK always names an exec before sending
    it, so a call it must make again names the same exec, and a cancel can
    reach an exec whose start is still on its way."""
    return "py-" + secrets.token_hex(8)


def _ms(seconds: Optional[float]) -> Optional[str]:
    """Seconds as whole milliseconds for the wire (rounded up, so a tiny
    positive duration never becomes 0, "no limit")."""
    if seconds is None:
        return None
    ms = math.ceil(seconds * 1000) if seconds > 0 else int(seconds * 1000)
    return str(ms)


def _signal_number(sig: Union[int, str, enum.Enum]) -> int:
    if isinstance(sig, enum.Enum):
        sig = sig.name
    if isinstance(sig, int):
        return sig
    name = sig.upper()
    name = name[3:] if name.startswith("SIG") else name
    if name not in _SIGNALS:
        raise errors.InvalidArgument(f"signal {sig!r}: not a Linux signal name")
    return _SIGNALS[name]


class Sandbox:
    """A sandbox owned by the client's tenant.

    Get one from :meth:`Client.create`, :meth:`Client.get` or
    :meth:`Client.list`. Used as a context manager, it is removed (with
    ``force``) when the block ends::

        with client.create(idle_ttl=600) as sb:
            res = sb.run("make test", timeout=600)

    Attributes:
        client: the :class:`~runbox.Client` it belongs to.
        id: the server's id ("sb-..."), stable across a recreate.
        info: the :class:`~runbox.SandboxInfo` last read.
        files: its file calls (:class:`~runbox.Files`).
    """

    def __init__(self, client: "Client", info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.id = info.id
        self.files = Files(self)

    @property
    def name(self) -> str:
        """The sandbox's alias, or ""."""
        return self.info.name

    def __repr__(self) -> str:
        return f"<runbox.Sandbox {self.id} provider={self.info.provider!r} state={self.info.state!r}>"

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self.remove(force=True)
        except errors.NotFound:
            pass

    # -- lifecycle ------------------------------------------------------------

    def refresh(self) -> SandboxInfo:
        """Reads the sandbox's state again (``state`` "lost" when its
        runboxd is gone) and returns it."""
        self.info = self.client._get_info(self.id)
        return self.info

    def remove(self, force: bool = False) -> None:
        """Stops every exec with the stop protocol and destroys the sandbox.
        A lost sandbox needs ``force=True``."""
        self.client.remove(self.id, force=force)

    # -- network --------------------------------------------------------------

    def set_egress(
        self,
        allow: Optional[Sequence[str]] = None,
        allow_cidr: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
        resolve: Optional[Mapping[str, str]] = None,
    ) -> SandboxInfo:
        """Replaces the egress policy of a sandbox made with
        ``network="private"`` (no rule: it reaches nothing). The change
        applies to every connection opened from then on. Returns the
        sandbox as the server now describes it."""
        from .client import egress_policy

        out = self.client._call("SetEgress", {"sandboxId": self.id, "egress": egress_policy(allow, allow_cidr, deny, resolve)})
        self.info = SandboxInfo.from_json(out.get("sandbox") or {})
        return self.info

    def expose(self, port: int, ttl: Optional[float] = None) -> ExposedPort:
        """Makes ``port`` on the sandbox's loopback reachable through the
        server's route (HTTP and WebSocket) and returns its URLs: ``url``
        for a caller with the tenant's token, ``signed_url`` (valid ``ttl``
        seconds, default one hour, at most seven days) for anyone holding
        it. A port never exposed is not reachable."""
        req: Dict[str, Any] = {"sandboxId": self.id, "port": int(port)}
        if ttl is not None:
            req["urlTtlMs"] = _ms(ttl)
        out = self.client._call("ExposePort", req)
        return ExposedPort(
            port=int(port),
            url=str(out.get("url", "")),
            signed_url=str(out.get("signedUrl", "")),
            expires_at=int(out.get("expiresAtUnixMs") or 0) / 1e3,
        )

    def unexpose(self, port: int) -> None:
        """Closes ``port``'s route: its token access and every signed URL
        are refused from then on."""
        self.client._call("UnexposePort", {"sandboxId": self.id, "port": int(port)})

    # -- execs ----------------------------------------------------------------

    def run(
        self,
        command: Command,
        *,
        timeout: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[bytes, str, None] = None,
        session: Optional[str] = None,
        grace: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        id: Optional[str] = None,
        login: bool = False,
        head_bytes: Optional[int] = None,
        tail_bytes: Optional[int] = None,
        spill: Optional[str] = None,
        merge_output: bool = False,
    ) -> Result:
        """Runs a command to its end and returns its :class:`~runbox.Result`.

        Args:
            command: a shell string (run by ``bash -c``, or ``sh -c`` where
                bash is absent), or a list of arguments run directly.
            timeout: seconds the command may run; the sandbox stops it and
                everything it started (SIGTERM, ``grace``, SIGKILL) and the
                Result says ``timed_out``. None: no limit.
            cwd: its working directory in the sandbox.
            env: environment variables to add.
            stdin: bytes (or text) given as its stdin, then closed; without
                it stdin is /dev/null, so nothing waits for input.
            session: a shell session name: the command starts in the
                session's directory and exported environment, and a normal
                exit saves them back.
            grace: seconds between SIGTERM and SIGKILL (default 5).
            idle_timeout: stop it after this many seconds without output.
            id: the exec's id (default: a fresh one). Running an id that
                exists returns that exec's result instead of running again.
            login: run a login shell.
            head_bytes, tail_bytes: how much of the start and end of each
                stream the Result keeps (default 32 KiB each).
            spill: "auto", "always" or "never": when the full output is also
                written to a file in the sandbox (Result.stdout_spill).
            merge_output: also keep stdout and stderr together in the order
                they were read (``Result.merged``, and ``Result.output``):
                the output is streamed to this process to learn the order.

        A non-zero exit, a timeout or a cancel is in the Result. Exceptions
        mean runbox could not run the command or learn how it ended:
        :class:`~runbox.InvalidSpec` (nothing ran), :class:`~runbox.SpawnError`,
        :class:`~runbox.SandboxLost`, ...

        The call's own deadline is ``timeout + grace + headroom``
        (:attr:`Client.headroom`), so the sandbox's deadline always comes
        first and a slow command is reported as ``timed_out``, never as a
        client-side timeout. If the connection breaks, the call is made
        again with the same exec id, which attaches to the running exec: a
        command never runs twice. A ``KeyboardInterrupt`` while waiting
        cancels the exec in the sandbox, then propagates.
        """
        spec = self._spec(
            command, timeout=timeout, cwd=cwd, env=env, stdin=stdin, session=session,
            grace=grace, idle_timeout=idle_timeout, id=id, login=login,
            head_bytes=head_bytes, tail_bytes=tail_bytes, spill=spill,
        )  # fmt: skip
        deadline = self._deadline(timeout, grace)
        if merge_output or getattr(self.client, "direct", False):
            # Merging needs the stream; so does a runboxd reached directly
            # (local mode: no server to run it in one call).
            with self._start(spec, False, True, merge_output, head_bytes, tail_bytes, deadline) as p:
                return p.wait()
        try:
            return self._run_unary(spec, deadline)
        except KeyboardInterrupt:
            self._cancel_quietly(spec["id"])
            raise

    def _run_unary(self, spec: Dict[str, Any], deadline: Optional[float]) -> Result:
        broke_at: Optional[float] = None
        backoff = 0.05
        while True:
            try:
                out, headers = self.client._transport.unary(
                    "runbox.v1.SandboxService/Run",
                    {"sandboxId": self.id, "spec": spec},
                    timeout=deadline,
                )
                return Result.from_json(out.get("result") or {}, recreated=bool(out.get("recreated")))
            except errors.RunboxError as e:
                if not _transient(e):
                    raise
                err = e
            now = time.monotonic()
            broke_at = broke_at or now
            left = self.client.reconnect_window - (now - broke_at)
            if left <= 0:
                raise errors.SandboxLost(
                    f"exec {spec['id']}: no answer for {self.client.reconnect_window:g}s: {err}"
                ) from err
            time.sleep(min(backoff, left))
            backoff = min(backoff * 2, 1.0)

    def start(
        self,
        command: Command,
        *,
        timeout: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: Union[bytes, str, None] = None,
        stdin_stream: bool = False,
        session: Optional[str] = None,
        grace: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        id: Optional[str] = None,
        login: bool = False,
        head_bytes: Optional[int] = None,
        tail_bytes: Optional[int] = None,
        spill: Optional[str] = None,
        stream_output: bool = True,
        merge_output: bool = False,
    ) -> Process:
        """Starts a command and returns a :class:`~runbox.Process` once it
        has started (a refused command raises here). Iterate over the
        Process for its output as it is read; ``wait()`` for its Result.

        Takes the arguments of :meth:`run`, plus ``stdin_stream`` (keep
        stdin open for :meth:`Process.write_stdin`) and ``stream_output``
        (False: only the Result, no chunks). With ``merge_output`` the
        Result also keeps stdout and stderr in the order read
        (``Result.merged``). A ``KeyboardInterrupt`` before the exec started
        cancels it.
        """
        spec = self._spec(
            command, timeout=timeout, cwd=cwd, env=env, stdin=stdin, session=session,
            grace=grace, idle_timeout=idle_timeout, id=id, login=login,
            head_bytes=head_bytes, tail_bytes=tail_bytes, spill=spill,
        )  # fmt: skip
        return self._start(spec, stdin_stream, stream_output, merge_output, head_bytes, tail_bytes,
                           self._deadline(timeout, grace))

    def _start(self, spec: Dict[str, Any], stdin_stream: bool, stream_output: bool, merge_output: bool,
               head_bytes: Optional[int], tail_bytes: Optional[int], read_timeout: Optional[float]) -> Process:
        if stdin_stream:
            spec["stdinStream"] = True
        p = Process(
            self,
            spec["id"],
            run_request={"spec": spec, "streamOutput": stream_output or merge_output},
            stream_output=stream_output or merge_output,
            read_timeout=read_timeout,
            merge=merge_buffer(merge_output, head_bytes, tail_bytes),
        )
        try:
            p._start()
        except KeyboardInterrupt:
            self._cancel_quietly(spec["id"])
            p.close()
            raise
        except BaseException:
            p.close()
            raise
        return p

    def popen(
        self,
        command: Command,
        *,
        stdout: Optional[int] = -1,
        stderr: Optional[int] = -1,
        stdin: Union[int, bytes, str, None] = None,
        text: bool = False,
        timeout: Optional[float] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        session: Optional[str] = None,
        grace: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        id: Optional[str] = None,
        login: bool = False,
        head_bytes: Optional[int] = None,
        tail_bytes: Optional[int] = None,
        spill: Optional[str] = None,
    ) -> "Popen":
        """Starts a command and returns a :class:`~runbox.Popen`: the
        interface of :class:`subprocess.Popen` (``poll``, ``wait(timeout)``,
        ``returncode``, ``stdout``/``stderr`` pipes with ``fileno()``,
        ``kill``/``terminate`` of the exec's whole tree, ``communicate``).

        ``stdout``/``stderr`` are ``runbox.PIPE`` (default) or
        ``runbox.DEVNULL``; ``stderr=runbox.STDOUT`` puts both streams in
        ``stdout``'s pipe in the order read. ``stdin`` is ``runbox.PIPE``
        (write to ``p.stdin``), bytes or text given as the whole input, or
        None (/dev/null). The other arguments are :meth:`run`'s.
        """
        from .popen import PIPE, Popen

        data = None if isinstance(stdin, int) else stdin
        spec = self._spec(
            command, timeout=timeout, cwd=cwd, env=env, stdin=data, session=session,
            grace=grace, idle_timeout=idle_timeout, id=id, login=login,
            head_bytes=head_bytes, tail_bytes=tail_bytes, spill=spill,
        )  # fmt: skip
        p = self._start(spec, stdin == PIPE, True, False, head_bytes, tail_bytes, self._deadline(timeout, grace))
        return Popen(p, command, stdout=stdout, stderr=stderr, stdin=PIPE if stdin == PIPE else None, text=text)

    def attach(
        self,
        exec_id: str,
        *,
        from_seq: int = 1,
        stream_output: bool = True,
        timeout: Optional[float] = None,
    ) -> Process:
        """Follows an exec that is already running (or has exited and is
        still retained), replaying its output from sequence number
        ``from_seq`` as far as the sandbox's replay ring (1 MiB a stream)
        reaches. ``timeout`` bounds each wait for the next event (None: no
        bound). Raises :class:`~runbox.ExecNotFound` for an unknown id."""
        p = Process(self, exec_id, stream_output=stream_output, from_seq=from_seq, read_timeout=timeout)
        try:
            p._start()
        except BaseException:
            p.close()
            raise
        return p

    def cancel(self, exec_id: str, grace: Optional[float] = None) -> bool:
        """Stops an exec with the stop protocol (idempotent). For an id not
        started yet it leaves a tombstone, so a later start with that id is
        refused (:class:`~runbox.ExecCancelled`). Returns whether the id was
        known."""
        req: Dict[str, Any] = {"id": exec_id}
        if grace is not None:
            req["graceMs"] = _ms(grace)
        out = self._exec_call("Cancel", req)
        return bool(out.get("known"))

    def signal(self, exec_id: str, sig: Union[int, str, enum.Enum]) -> int:
        """Sends a signal (a number, a name like "INT"/"SIGINT", or a
        ``signal.Signals``) to every process of an exec; returns how many
        were signalled. Raises :class:`~runbox.NotRunning` once it exited."""
        out = self._exec_call("Signal", {"id": exec_id, "signal": _signal_number(sig)})
        return int(out.get("signalled", 0))

    def execs(self, omit_output: bool = False) -> List[ExecInfo]:
        """The execs the sandbox's runboxd keeps: running, and recently
        exited. With ``omit_output`` each exited exec's result comes
        without its stdout and stderr (both empty; the byte counts and
        everything else still come): the kept results' output can add up
        to tens of MiB, which a caller that reads only states and exit
        codes need not fetch."""
        out = self._exec_call("List", {"omitOutput": True} if omit_output else {})
        return [ExecInfo.from_json(e) for e in out.get("execs") or []]

    def delete_session(self, name: str) -> None:
        """Forgets a shell session (:class:`~runbox.SessionNotFound` if
        there is none)."""
        self._exec_call("DeleteSession", {"name": name})

    def pause(self) -> None:
        """Freezes every process of the sandbox's commands. Their timeouts
        stop counting until :meth:`resume`; a new :meth:`run` raises
        :class:`~runbox.SandboxPaused`. Pausing a paused sandbox does
        nothing."""
        self._exec_call("Pause", {})

    def resume(self) -> None:
        """Thaws what :meth:`pause` froze: every exec goes on with the time
        it had left. Resuming a running sandbox does nothing."""
        self._exec_call("Resume", {})

    def paused(self) -> bool:
        """Whether the sandbox is paused (its runboxd's Info)."""
        return bool(self._exec_call("Info", {}).get("paused"))

    def snapshot(self, name: Optional[str] = None, no_workspace: bool = False) -> Snapshot:
        """Takes a snapshot of the sandbox's files (and its workspace unless
        ``no_workspace``) as one of the tenant's snapshots, ``name`` or a
        generated one; :meth:`Client.create` with ``from_snapshot`` starts
        new sandboxes from it. Over the tenant's ``--max-snapshots``:
        :class:`~runbox.QuotaExceeded`; a provider that cannot:
        :class:`~runbox.Unsupported`."""
        req: Dict[str, Any] = {"sandboxId": self.id}
        if name:
            req["name"] = name
        if no_workspace:
            req["noWorkspace"] = True
        out = self.client._call("CreateSnapshot", req)
        return Snapshot.from_json(out.get("snapshot") or {})

    def fork(self, count: int = 1, no_workspace: bool = False) -> List["Sandbox"]:
        """Makes ``count`` new sandboxes from a snapshot of this one, each
        independent of the others and of this one. The snapshot is kept
        (:meth:`Client.snapshots`)."""
        local_fork = getattr(self.client, "_fork", None)
        if local_fork is not None:  # local mode: runbox fork
            return local_fork(self.id, int(count), no_workspace)  # type: ignore[no-any-return]
        req: Dict[str, Any] = {"sandboxId": self.id, "count": int(count)}
        if no_workspace:
            req["noWorkspace"] = True
        out = self.client._call("ForkSandbox", req)
        return [Sandbox(self.client, SandboxInfo.from_json(s)) for s in out.get("sandboxes") or []]

    # -- plumbing -------------------------------------------------------------

    def _spec(
        self,
        command: Command,
        *,
        timeout: Optional[float],
        cwd: Optional[str],
        env: Optional[Mapping[str, str]],
        stdin: Union[bytes, str, None],
        session: Optional[str],
        grace: Optional[float],
        idle_timeout: Optional[float],
        id: Optional[str],
        login: bool,
        head_bytes: Optional[int],
        tail_bytes: Optional[int],
        spill: Optional[str],
    ) -> Dict[str, Any]:
        """The ``runbox.v1.ExecSpec`` JSON of a command and its options."""
        spec: Dict[str, Any] = {"id": id or new_exec_id()}
        if isinstance(command, str):
            spec["command"] = command
        elif isinstance(command, (bytes, bytearray)):
            raise errors.InvalidArgument("command: give a str (shell) or a list of str (argv), not bytes")
        else:
            spec["argv"] = [str(a) for a in command]
        optional = {
            "cwd": cwd,
            "session": session,
            "timeoutMs": _ms(timeout),
            "graceMs": _ms(grace),
            "idleTimeoutMs": _ms(idle_timeout),
            "headBytes": None if head_bytes is None else str(head_bytes),
            "tailBytes": None if tail_bytes is None else str(tail_bytes),
        }
        spec.update({k: v for k, v in optional.items() if v is not None})
        if env:
            spec["env"] = {str(k): str(v) for k, v in env.items()}
        if stdin is not None:
            data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
            spec["stdin"] = base64.b64encode(data).decode()
        if login:
            spec["login"] = True
        if spill is not None:
            spec["spill"] = "SPILL_MODE_" + spill.upper()
        return spec

    def _deadline(self, timeout: Optional[float], grace: Optional[float]) -> Optional[float]:
        """The call's own deadline: the command's timeout plus grace plus
        headroom, so the sandbox's deadline always wins. None without a
        timeout (the command may run for ever; so may the call)."""
        if not timeout or timeout <= 0:
            return None
        g = DEFAULT_GRACE if grace is None else max(grace, 0.0)
        return timeout + g + self.client.headroom

    def _cancel_quietly(self, exec_id: str) -> None:
        """Cancels an exec on behalf of an interrupted call, ignoring every
        failure (the interruption is what the caller must see)."""
        try:
            self._exec_call("Cancel", {"id": exec_id}, timeout=self.client.headroom)
        except errors.RunboxError:
            pass

    def _headers(self) -> Dict[str, str]:
        return {"Runbox-Sandbox": self.id}

    def _exec_call(self, method: str, req: Mapping[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        """A unary RunboxService call routed to this sandbox."""
        return self._routed("runbox.v1.RunboxService/" + method, req, timeout)

    def _routed(self, procedure: str, req: Mapping[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        """A unary call routed to this sandbox. Within the reconnect window
        it is made again when the server could not be reached (the request
        was not sent), and, for calls whose repetition changes nothing
        (Cancel, List, Info, reads), when the connection broke."""
        repeatable = procedure.rsplit("/", 1)[-1] in _REPEATABLE
        broke_at: Optional[float] = None
        while True:
            try:
                out, _ = self.client._transport.unary(
                    procedure, req, headers=self._headers(), timeout=timeout or self.client.timeout
                )
                return out
            except errors.RunboxError as e:
                if not _transient(e) or not (repeatable or (isinstance(e, ConnectionLost) and not e.sent)):
                    raise
                now = time.monotonic()
                broke_at = broke_at or now
                if now - broke_at >= self.client.reconnect_window:
                    raise
            time.sleep(0.1)

    def _exec_stream(self, method: str, req: Mapping[str, Any], timeout: Optional[float]) -> ServerStream:
        return self.client._transport.server_stream(
            "runbox.v1.RunboxService/" + method, req, headers=self._headers(), timeout=timeout
        )
