"""runbox on asyncio: the same calls as :mod:`runbox`, awaitable.

Standard library only. :class:`AsyncClient` (a ``runbox serve``) and
:func:`local` (sandboxes of this machine, no server) hand out
:class:`AsyncSandbox` es whose ``run``, ``start``, ``attach``, ``cancel``,
``signal``, ``execs`` are coroutines, talking Connect over asyncio's own
streams: no thread per call. A started :class:`AsyncProcess` is an async
iterator of output chunks::

    import asyncio, runbox.aio

    async def main():
        async with runbox.aio.AsyncClient() as client:
            async with await client.create(idle_ttl=600) as sb:
                res = await sb.run("make test", timeout=600)
                async with await sb.start("npm run build", timeout=300) as p:
                    async for chunk in p:
                        print(chunk.text, end="")
                print(p.result.exit_code)

    asyncio.run(main())

Cancellation is task cancellation: cancelling a task awaiting ``run`` or
``wait`` (``asyncio.wait_for``, a ``TaskGroup`` failing, ...) cancels the
exec in the sandbox with the stop protocol, then lets ``CancelledError``
propagate; so does leaving ``async with p:`` with an exception. File
calls (:attr:`AsyncSandbox.files`) run the sync :class:`runbox.Files` in a
worker thread (``asyncio.to_thread``).

Errors, Results and Chunks are the classes of :mod:`runbox`.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar, Union

from .. import errors
from .._follow import merge_buffer, transient
from ..client import Client, egress_policy
from ..files import Files
from ..local import Local
from ..models import ExecInfo, ExposedPort, FileInfo, Result, SandboxInfo, Snapshot
from ..sandbox import Command, Sandbox, _ms, _signal_number
from ._process import AsyncProcess
from ._transport import AsyncServerStream, AsyncTransport

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncProcess", "AsyncFiles", "AsyncLocal", "local"]

T = TypeVar("T")


async def _to_thread(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kw)


class AsyncClient:
    """:class:`runbox.Client` on asyncio: the same arguments (host and token
    from ``RUNBOX_HOST``/``RUNBOX_TOKEN`` by default)."""

    def __init__(self, host: Optional[str] = None, token: Optional[str] = None, *,
                 ssl_context: Optional[ssl.SSLContext] = None, timeout: float = 120.0,
                 headroom: float = 5.0, reconnect_window: float = 15.0) -> None:
        self.sync = Client(host, token, ssl_context=ssl_context, timeout=timeout, headroom=headroom,
                           reconnect_window=reconnect_window)
        self.host = self.sync.host
        self._t = AsyncTransport(self.sync._transport)

    def __repr__(self) -> str:
        return f"<runbox.aio.AsyncClient {self.host}>"

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Releases the client (it holds no connection between calls)."""

    async def _call(self, method: str, req: Mapping[str, Any]) -> Dict[str, Any]:
        out, _ = await self._t.unary("runbox.v1.SandboxService/" + method, req, timeout=self.sync.timeout)
        return out

    def _sandbox(self, info: SandboxInfo) -> "AsyncSandbox":
        return AsyncSandbox(self, Sandbox(self.sync, info), self._t)

    async def create(self, **kw: Any) -> "AsyncSandbox":
        """Creates a sandbox: the arguments of :meth:`runbox.Client.create`."""
        req = self.sync._create_request(**kw)
        out = await self._call("Create", req)
        return self._sandbox(SandboxInfo.from_json(out.get("sandbox") or {}))

    async def _get_info(self, id_or_name: str) -> SandboxInfo:
        out = await self._call("Get", {"id": id_or_name})
        return SandboxInfo.from_json(out.get("sandbox") or {})

    async def get(self, id_or_name: str) -> "AsyncSandbox":
        """The tenant's sandbox with that id or name."""
        return self._sandbox(await self._get_info(id_or_name))

    async def list(self, labels: Optional[Mapping[str, str]] = None) -> List["AsyncSandbox"]:
        """The tenant's sandboxes, oldest first (only those with every label)."""
        out = await self._call("List", {"labels": dict(labels)} if labels else {})
        return [self._sandbox(SandboxInfo.from_json(s)) for s in out.get("sandboxes") or []]

    async def snapshots(self) -> List[Snapshot]:
        """The tenant's snapshots, oldest first."""
        out = await self._call("ListSnapshots", {})
        return [Snapshot.from_json(s) for s in out.get("snapshots") or []]

    async def delete_snapshot(self, name: str) -> None:
        """Deletes one of the tenant's snapshots."""
        await self._call("DeleteSnapshot", {"name": name})

    async def remove(self, id_or_name: str, force: bool = False) -> None:
        """Removes a sandbox (a lost one needs ``force=True``)."""
        req: Dict[str, Any] = {"id": id_or_name}
        if force:
            req["force"] = True
        await self._call("Delete", req)


class AsyncLocal:
    """:class:`runbox.Local` on asyncio: the CLI calls (create, get, list,
    remove) run in a worker thread; exec calls go to each runboxd's socket
    on asyncio."""

    def __init__(self, runbox: Optional[str] = None, **kw: Any) -> None:
        self.sync = Local(runbox, **kw)

    async def __aenter__(self) -> "AsyncLocal":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Releases the client."""

    def _wrap(self, sb: Sandbox) -> "AsyncSandbox":
        return AsyncSandbox(self, sb, AsyncTransport(sb.client._transport))

    async def create(self, **kw: Any) -> "AsyncSandbox":
        """Creates a sandbox: the arguments of :meth:`runbox.Local.create`."""
        return self._wrap(await _to_thread(self.sync.create, **kw))

    async def get(self, id_or_name: str) -> "AsyncSandbox":
        """The sandbox with that id, name or unique id prefix."""
        return self._wrap(await _to_thread(self.sync.get, id_or_name))

    async def list(self) -> List["AsyncSandbox"]:
        """This machine's host and local sandboxes."""
        return [self._wrap(sb) for sb in await _to_thread(self.sync.list)]

    async def remove(self, id_or_name: str, force: bool = False) -> None:
        """Removes a sandbox with ``runbox rm``."""
        await _to_thread(self.sync.remove, id_or_name, force)

    async def _get_info(self, id_or_name: str) -> SandboxInfo:
        return (await _to_thread(self.sync._inspect, id_or_name))[0]


def local(runbox: Optional[str] = None, **kw: Any) -> AsyncLocal:
    """Returns an :class:`AsyncLocal` (the arguments of :func:`runbox.local`)."""
    return AsyncLocal(runbox, **kw)


class AsyncSandbox:
    """:class:`runbox.Sandbox` on asyncio. ``async with`` removes it (with
    ``force``) at the end of the block."""

    def __init__(self, owner: Union[AsyncClient, AsyncLocal], sync: Sandbox, transport: AsyncTransport) -> None:
        self.owner = owner
        self._sync = sync
        self._t = transport
        self.id = sync.id
        self.files = AsyncFiles(sync.files)

    @property
    def info(self) -> SandboxInfo:
        """The SandboxInfo last read."""
        return self._sync.info

    @property
    def name(self) -> str:
        """The sandbox's alias, or ""."""
        return self._sync.name

    def __repr__(self) -> str:
        return f"<runbox.aio.AsyncSandbox {self.id} provider={self.info.provider!r}>"

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            await self.remove(force=True)
        except errors.NotFound:
            pass

    async def refresh(self) -> SandboxInfo:
        """Reads the sandbox's state again and returns it."""
        self._sync.info = await self.owner._get_info(self.id)
        return self._sync.info

    async def remove(self, force: bool = False) -> None:
        """Stops every exec and destroys the sandbox."""
        await self.owner.remove(self.id, force=force)

    async def run(self, command: Command, *, merge_output: bool = False, **kw: Any) -> Result:
        """Runs a command to its end: the arguments of :meth:`runbox.Sandbox.run`.
        A cancelled call cancels the exec, then propagates."""
        spec = self._sync._spec(command, **_spec_args(kw))
        deadline = self._sync._deadline(kw.get("timeout"), kw.get("grace"))
        if merge_output or getattr(self._sync.client, "direct", False):
            p = await self._start(spec, False, True, merge_output, kw, deadline)
            async with p:
                return await p.wait()
        try:
            return await self._run_unary(spec, deadline)
        except asyncio.CancelledError:
            await self._cancel_quietly(spec["id"])
            raise

    async def _run_unary(self, spec: Dict[str, Any], deadline: Optional[float]) -> Result:
        loop = asyncio.get_running_loop()
        broke_at: Optional[float] = None
        backoff = 0.05
        while True:
            try:
                out, _ = await self._t.unary("runbox.v1.SandboxService/Run", {"sandboxId": self.id, "spec": spec},
                                             timeout=deadline)
                return Result.from_json(out.get("result") or {}, recreated=bool(out.get("recreated")))
            except errors.RunboxError as e:
                if not transient(e):
                    raise
                err = e
            now = loop.time()
            broke_at = broke_at or now
            left = self._sync.client.reconnect_window - (now - broke_at)
            if left <= 0:
                raise errors.SandboxLost(f"exec {spec['id']}: no answer: {err}") from err
            await asyncio.sleep(min(backoff, left))
            backoff = min(backoff * 2, 1.0)

    async def start(self, command: Command, *, stdin_stream: bool = False, stream_output: bool = True,
                    merge_output: bool = False, **kw: Any) -> AsyncProcess:
        """Starts a command and returns an :class:`AsyncProcess` once it has
        started: the arguments of :meth:`runbox.Sandbox.start`."""
        spec = self._sync._spec(command, **_spec_args(kw))
        deadline = self._sync._deadline(kw.get("timeout"), kw.get("grace"))
        return await self._start(spec, stdin_stream, stream_output, merge_output, kw, deadline)

    async def _start(self, spec: Dict[str, Any], stdin_stream: bool, stream_output: bool, merge_output: bool,
                     kw: Mapping[str, Any], read_timeout: Optional[float]) -> AsyncProcess:
        if stdin_stream:
            spec["stdinStream"] = True
        p = AsyncProcess(self, spec["id"], run_request={"spec": spec, "streamOutput": stream_output or merge_output},
                         stream_output=stream_output or merge_output, read_timeout=read_timeout,
                         merge=merge_buffer(merge_output, kw.get("head_bytes"), kw.get("tail_bytes")))
        try:
            await p._start()
        except asyncio.CancelledError:
            p.close()
            await self._cancel_quietly(spec["id"])
            raise
        except BaseException:
            p.close()
            raise
        return p

    async def attach(self, exec_id: str, *, from_seq: int = 1, stream_output: bool = True,
                     timeout: Optional[float] = None) -> AsyncProcess:
        """Follows an exec that exists, replaying from ``from_seq``."""
        p = AsyncProcess(self, exec_id, stream_output=stream_output, from_seq=from_seq, read_timeout=timeout)
        try:
            await p._start()
        except BaseException:
            p.close()
            raise
        return p

    async def cancel(self, exec_id: str, grace: Optional[float] = None) -> bool:
        """Stops an exec with the stop protocol; whether the id was known."""
        req: Dict[str, Any] = {"id": exec_id}
        if grace is not None:
            from ..sandbox import _ms

            req["graceMs"] = _ms(grace)
        return bool((await self._exec_call("Cancel", req)).get("known"))

    async def signal(self, exec_id: str, sig: Union[int, str]) -> int:
        """Signals every process of an exec; how many were signalled."""
        out = await self._exec_call("Signal", {"id": exec_id, "signal": _signal_number(sig)})
        return int(out.get("signalled", 0))

    async def execs(self, omit_output: bool = False) -> List[ExecInfo]:
        """The execs the sandbox's runboxd keeps (``omit_output``: as
        :meth:`runbox.Sandbox.execs`)."""
        req = {"omitOutput": True} if omit_output else {}
        return [ExecInfo.from_json(e) for e in (await self._exec_call("List", req)).get("execs") or []]

    async def delete_session(self, name: str) -> None:
        """Forgets a shell session."""
        await self._exec_call("DeleteSession", {"name": name})

    async def _cancel_quietly(self, exec_id: str) -> None:
        try:
            await self._exec_call("Cancel", {"id": exec_id}, timeout=self._sync.client.headroom)
        except errors.RunboxError:
            pass

    async def pause(self) -> None:
        """Freezes every process of the sandbox's commands (:meth:`runbox.Sandbox.pause`)."""
        await self._exec_call("Pause", {})

    async def resume(self) -> None:
        """Thaws what :meth:`pause` froze."""
        await self._exec_call("Resume", {})

    async def paused(self) -> bool:
        """Whether the sandbox is paused."""
        return bool((await self._exec_call("Info", {})).get("paused"))

    async def snapshot(self, name: Optional[str] = None, no_workspace: bool = False) -> Snapshot:
        """Takes a snapshot of the sandbox (:meth:`runbox.Sandbox.snapshot`)."""
        req: Dict[str, Any] = {"sandboxId": self.id}
        if name:
            req["name"] = name
        if no_workspace:
            req["noWorkspace"] = True
        out = await self._server()._call("CreateSnapshot", req)
        return Snapshot.from_json(out.get("snapshot") or {})

    async def fork(self, count: int = 1, no_workspace: bool = False) -> List["AsyncSandbox"]:
        """Makes ``count`` independent sandboxes from a snapshot of this one."""
        req: Dict[str, Any] = {"sandboxId": self.id, "count": int(count)}
        if no_workspace:
            req["noWorkspace"] = True
        srv = self._server()
        out = await srv._call("ForkSandbox", req)
        return [srv._sandbox(SandboxInfo.from_json(s)) for s in out.get("sandboxes") or []]

    async def set_egress(
        self,
        allow: Optional[Sequence[str]] = None,
        allow_cidr: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
        resolve: Optional[Mapping[str, str]] = None,
    ) -> SandboxInfo:
        """Replaces the egress policy of a ``network="private"`` sandbox
        (:meth:`runbox.Sandbox.set_egress`); connections opened from then on
        get it. Returns the sandbox as the server now describes it."""
        req = {"sandboxId": self.id, "egress": egress_policy(allow, allow_cidr, deny, resolve)}
        out = await self._server()._call("SetEgress", req)
        self._sync.info = SandboxInfo.from_json(out.get("sandbox") or {})
        return self._sync.info

    async def expose(self, port: int, ttl: Optional[float] = None) -> ExposedPort:
        """Makes ``port`` on the sandbox's loopback reachable through the
        server's route and returns its URLs (:meth:`runbox.Sandbox.expose`)."""
        req: Dict[str, Any] = {"sandboxId": self.id, "port": int(port)}
        if ttl is not None:
            req["urlTtlMs"] = _ms(ttl)
        out = await self._server()._call("ExposePort", req)
        return ExposedPort(
            port=int(port),
            url=str(out.get("url", "")),
            signed_url=str(out.get("signedUrl", "")),
            expires_at=int(out.get("expiresAtUnixMs") or 0) / 1e3,
        )

    async def unexpose(self, port: int) -> None:
        """Closes ``port``'s route (:meth:`runbox.Sandbox.unexpose`)."""
        await self._server()._call("UnexposePort", {"sandboxId": self.id, "port": int(port)})

    def _server(self) -> AsyncClient:
        if not isinstance(self.owner, AsyncClient):
            raise errors.Unsupported("snapshots, forks, egress policies and exposed ports need runbox serve (runbox.aio.AsyncClient)")
        return self.owner

    async def _exec_call(self, method: str, req: Mapping[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        out, _ = await self._t.unary("runbox.v1.RunboxService/" + method, req, headers=self._sync._headers(),
                                     timeout=timeout or self._sync.client.timeout)
        return out

    async def _exec_stream(self, method: str, req: Mapping[str, Any], timeout: Optional[float]) -> AsyncServerStream:
        return await self._t.server_stream("runbox.v1.RunboxService/" + method, req,
                                           headers=self._sync._headers(), timeout=timeout)


_SPEC_ARGS = ("timeout", "cwd", "env", "stdin", "session", "grace", "idle_timeout", "id", "login",
              "head_bytes", "tail_bytes", "spill")


def _spec_args(kw: Mapping[str, Any]) -> Dict[str, Any]:
    bad = set(kw) - set(_SPEC_ARGS)
    if bad:
        raise TypeError(f"unexpected keyword arguments: {', '.join(sorted(bad))}")
    return {k: kw.get(k) for k in _SPEC_ARGS if k != "login"} | {"login": bool(kw.get("login"))}


class AsyncFiles:
    """:class:`runbox.Files` awaitable: each call runs in a worker thread."""

    def __init__(self, files: Files) -> None:
        self.sync = files

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        fn = getattr(self.sync, name)
        if name.startswith("_") or not callable(fn):
            raise AttributeError(name)

        async def call(*args: Any, **kw: Any) -> Any:
            return await _to_thread(fn, *args, **kw)

        call.__doc__ = fn.__doc__
        return call

    async def read(self, path: str, **kw: Any) -> bytes:
        """As :meth:`runbox.Files.read`."""
        return await _to_thread(self.sync.read, path, **kw)

    async def write(self, path: str, data: Union[bytes, str], **kw: Any) -> FileInfo:
        """As :meth:`runbox.Files.write`."""
        return await _to_thread(self.sync.write, path, data, **kw)
