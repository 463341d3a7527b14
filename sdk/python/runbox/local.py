"""Sandboxes on this machine, without ``runbox serve`` and without a token.

:func:`local` returns a :class:`Local` client: it creates, lists and removes
sandboxes by running the ``runbox`` CLI (``up``, ``inspect``, ``ls --json``,
``rm``), and talks to each sandbox's runboxd directly over its unix socket,
as the CLI does: every connection starts with the sandbox's secret (the
0600 file ``secret`` in the sandbox's directory under ``$RUNBOX_HOME``),
then speaks Connect over HTTP/1.1. The :class:`~runbox.Sandbox` it returns
is the one of :class:`~runbox.Client`: ``run``, ``start``, ``popen``,
``attach``, ``files``, ... The providers whose runboxd listens on a socket
of this machine work this way: ``host`` and ``local``.

Only a user who can read the sandbox's directory (its owner, root) can
reach it, exactly as with the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Union

from . import errors
from ._connect import Transport
from .client import parse_size
from .models import SandboxInfo, Snapshot
from .sandbox import Sandbox

__all__ = ["Local", "local"]

# The runbox CLI's exit status when runbox itself failed (not a command).
_CLI_FAILED = 125
_SECRET_FILE = "secret"


def local(runbox: Optional[str] = None, **kw: Any) -> "Local":
    """Returns a :class:`Local` client (see there for the arguments)."""
    return Local(runbox, **kw)


class _Link:
    """What a local Sandbox reaches its runboxd through: a transport to its
    socket and the client's settings (the part of Client a Sandbox uses)."""

    #: Exec calls go to runboxd itself: no SandboxService, no server-side run.
    direct = True

    def __init__(self, owner: "Local", transport: Transport) -> None:
        self._owner = owner
        self._transport = transport
        self.timeout = owner.timeout
        self.headroom = owner.headroom
        self.reconnect_window = owner.reconnect_window

    def _get_info(self, id_or_name: str) -> SandboxInfo:
        return self._owner._inspect(id_or_name)[0]

    def remove(self, id_or_name: str, force: bool = False) -> None:
        self._owner.remove(id_or_name, force=force)

    def _call(self, method: str, req: Mapping[str, Any]) -> Dict[str, Any]:
        """The server calls a Sandbox makes: snapshots through the CLI; the
        rest need ``runbox serve``."""
        if method == "CreateSnapshot":
            snap = self._owner._snapshot(req["sandboxId"], req.get("name"), bool(req.get("noWorkspace")))
            return {"snapshot": _snapshot_json(snap)}
        raise errors.Unsupported(f"{method} needs runbox serve (runbox.Client): local mode reaches runboxd alone")

    def _fork(self, sandbox_id: str, count: int, no_workspace: bool) -> List[Sandbox]:
        return self._owner._fork(sandbox_id, count, no_workspace)


class Local:
    """Sandboxes of this machine through the ``runbox`` CLI and their
    runboxd sockets.

    Args:
        runbox: the runbox binary (default: ``$RUNBOX_BIN``, else ``runbox``
            in PATH).
        home: the runbox home holding the sandboxes (default:
            ``$RUNBOX_HOME``, else ``~/.runbox``, as the CLI).
        provider: the default provider for :meth:`create` ("host",
            "local"; default: the CLI's, ``$RUNBOX_PROVIDER``).
        timeout, headroom, reconnect_window: as :class:`~runbox.Client`'s.
    """

    def __init__(
        self,
        runbox: Optional[str] = None,
        *,
        home: Optional[str] = None,
        provider: Optional[str] = None,
        timeout: float = 120.0,
        headroom: float = 5.0,
        reconnect_window: float = 15.0,
    ) -> None:
        exe = runbox or os.environ.get("RUNBOX_BIN") or shutil.which("runbox")
        if not exe:
            raise errors.InvalidArgument("no runbox binary: put runbox in PATH, set RUNBOX_BIN, or pass runbox=")
        self.runbox = exe
        self.home = home
        self.provider = provider
        self.timeout = timeout
        self.headroom = headroom
        self.reconnect_window = reconnect_window

    def __repr__(self) -> str:
        return f"<runbox.Local {self.runbox} home={self.home or '(default)'}>"

    def __enter__(self) -> "Local":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def close(self) -> None:
        """Releases the client (it holds no connection between calls)."""

    def _cli(self, *args: str) -> str:
        """Runs the runbox CLI; its failure becomes the SDK's exception."""
        env = dict(os.environ)
        if self.home:
            env["RUNBOX_HOME"] = self.home
        # Local mode never goes through a server, whatever the environment says.
        env.pop("RUNBOX_HOST", None)
        env.pop("RUNBOX_TOKEN", None)
        try:
            out = subprocess.run([self.runbox, *args], env=env, capture_output=True, text=True,
                                 timeout=self.timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise errors.Unavailable(f"runbox {args[0]}: {e}") from e
        if out.returncode != 0:
            raise _cli_error(args[0], out.returncode, out.stderr)
        return out.stdout

    def create(
        self,
        *,
        provider: Optional[str] = None,
        name: Optional[str] = None,
        image: Optional[str] = None,
        workdir: Optional[str] = None,
        memory: Union[int, str, None] = None,
        pids: Optional[int] = None,
        cpus: Optional[float] = None,
        network: Optional[str] = None,
        from_snapshot: Optional[str] = None,
    ) -> Sandbox:
        """Creates a sandbox with ``runbox up`` and returns it once its
        runboxd answers. The arguments are ``runbox up``'s flags (see
        ``runbox up --help``; ``from_snapshot`` is ``--from``); ``workdir``
        defaults to this process's working directory, as the CLI's, or to a
        copy of the snapshot's workspace with ``from_snapshot``."""
        args = ["up"]
        flags: Mapping[str, Any] = {
            "--provider": provider or self.provider, "--name": name, "--image": image, "--workdir": workdir,
            "--memory": None if memory is None else str(parse_size(memory)), "--pids": pids, "--cpus": cpus,
            "--network": network, "--from": from_snapshot,
        }  # fmt: skip
        for flag, v in flags.items():
            if v is not None:
                args += [flag, str(v)]
        sb_id = self._cli(*args).strip()
        return self.get(sb_id)

    def get(self, id_or_name: str) -> Sandbox:
        """Returns the sandbox with that id, name or unique id prefix
        (:class:`~runbox.SandboxNotFound` if there is none)."""
        info, detail = self._inspect(id_or_name)
        return self._sandbox(info, detail)

    def list(self) -> List[Sandbox]:
        """Returns this machine's sandboxes of the providers local mode
        reaches (host, local), oldest first."""
        out = []
        for m in json.loads(self._cli("ls", "--json") or "[]"):
            if (m.get("detail") or {}).get("socket"):
                out.append(self._sandbox(_info(m), m.get("detail") or {}))
        return out

    def remove(self, id_or_name: str, force: bool = False) -> None:
        """Removes a sandbox with ``runbox rm``: every exec is stopped with
        the stop protocol. A lost sandbox needs ``force=True``."""
        self._cli("rm", *(["--force"] if force else []), id_or_name)

    def snapshots(self) -> List[Snapshot]:
        """This machine's snapshots (``runbox snapshot ls``), oldest first."""
        return [_snapshot(m) for m in json.loads(self._cli("snapshot", "ls", "--json") or "[]") or []]

    def delete_snapshot(self, name: str) -> None:
        """Deletes a snapshot (``runbox snapshot rm``); sandboxes made from
        it keep working."""
        self._cli("snapshot", "rm", name)

    def _snapshot(self, sandbox_id: str, name: Optional[str], no_workspace: bool) -> Snapshot:
        args = ["snapshot", sandbox_id] + ([name] if name else []) + (["--no-workspace"] if no_workspace else [])
        made = self._cli(*args).strip()
        for snap in self.snapshots():
            if snap.name == made:
                return snap
        raise errors.RunboxError(f"runbox snapshot made {made!r}, which runbox snapshot ls does not list")

    def _fork(self, sandbox_id: str, count: int, no_workspace: bool) -> List[Sandbox]:
        args = ["fork", sandbox_id, "--count", str(int(count))] + (["--no-workspace"] if no_workspace else [])
        return [self.get(i) for i in self._cli(*args).split()]

    def _inspect(self, id_or_name: str) -> "tuple[SandboxInfo, Dict[str, str]]":
        m = json.loads(self._cli("inspect", id_or_name))
        return _info(m), dict(m.get("detail") or {})

    def _sandbox(self, info: SandboxInfo, detail: Mapping[str, str]) -> Sandbox:
        sock, d = detail.get("socket", ""), detail.get("dir", "")
        if not sock or not d:
            raise errors.InvalidArgument(
                f"sandbox {info.id} ({info.provider}): its runboxd has no socket on this machine; "
                "local mode reaches host and local sandboxes (use runbox serve for the others)"
            )
        try:
            with open(os.path.join(d, _SECRET_FILE), "rb") as f:
                secret = f.read()
        except OSError as e:
            raise errors.Unauthenticated(f"sandbox {info.id}: read its secret: {e}") from e
        if len(secret) != 32:
            raise errors.Unauthenticated(f"sandbox {info.id}: its secret has {len(secret)} bytes, want 32")
        transport = Transport("http://localhost", "", unix_socket=sock, secret=secret)
        return Sandbox(_Link(self, transport), info)  # type: ignore[arg-type]


def _info(m: Mapping[str, Any]) -> SandboxInfo:
    """A SandboxInfo from the CLI's JSON for a sandbox."""
    detail = m.get("detail") or {}
    return SandboxInfo(
        id=str(m.get("id", "")),
        name=str(m.get("name", "")),
        provider=str(m.get("provider", "")),
        state="ready" if m.get("alive") else "lost",
        lost_reason=str(detail.get("lost", "")),
        provider_id=str(m.get("id", "")),
    )


def _snapshot(m: Mapping[str, Any]) -> Snapshot:
    """A Snapshot from ``runbox snapshot ls --json``."""
    created = str(m.get("created", ""))
    try:
        at = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() if created else 0.0
    except ValueError:
        at = 0.0
    return Snapshot(
        name=str(m.get("name", "")),
        provider=str(m.get("provider", "")),
        sandbox_id=str(m.get("sandbox", "")),
        created_at=at,
        workspace=bool(m.get("workspace", False)),
        bytes=int(m.get("bytes") or 0),
    )


def _snapshot_json(s: Snapshot) -> Dict[str, Any]:
    """A Snapshot as the server's JSON gives it (Snapshot.from_json's input)."""
    return {"name": s.name, "provider": s.provider, "sandboxId": s.sandbox_id,
            "createdAtUnixMs": int(s.created_at * 1000), "workspace": s.workspace, "bytes": s.bytes}  # fmt: skip


def _cli_error(cmd: str, status: int, stderr: str) -> errors.RunboxError:
    """The exception for a failed CLI call. The CLI has no error codes but
    its exit status (125: runbox failed), so the class comes from the text
    of the Go sentinel error its message ends with (runbox.ErrSandboxNotFound
    is "no such sandbox", ...): the only channel the CLI offers."""
    msg = stderr.strip().splitlines()[-1] if stderr.strip() else f"runbox {cmd}: exit status {status}"
    low = msg.lower()
    kinds = [
        ("no such sandbox", errors.SandboxNotFound), ("invalid spec", errors.InvalidSpec),
        ("unsupported operation by this provider", errors.Unsupported),
        ("unsupported operation", errors.InvalidSpec), ("sandbox lost", errors.SandboxLost),
        ("sandbox is paused", errors.SandboxPaused), ("quota exceeded", errors.QuotaExceeded),
        ("unauthenticated", errors.Unauthenticated), ("provider unavailable", errors.Unavailable),
        ("name already in use", errors.AlreadyExists), ("permission denied", errors.PermissionDenied),
    ]  # fmt: skip
    for needle, cls in kinds:
        if needle in low:
            return cls(msg)
    if status != _CLI_FAILED:
        return errors.InternalError(msg)
    return errors.RunboxError(msg)
