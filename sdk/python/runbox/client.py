"""The client of a runbox server: create, find, list and remove sandboxes."""

from __future__ import annotations

import os
import re
import ssl
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from . import errors
from ._connect import Transport
from .models import SandboxInfo, Snapshot
from .sandbox import Sandbox, _ms

__all__ = ["Client", "DEFAULT_HOST"]

#: The server address used when neither ``host`` nor ``RUNBOX_HOST`` is set.
DEFAULT_HOST = "http://127.0.0.1:7070"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def egress_policy(
    allow: Optional[Sequence[str]] = None,
    allow_cidr: Optional[Sequence[str]] = None,
    deny: Optional[Sequence[str]] = None,
    resolve: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """The ``runbox.v1.EgressPolicy`` JSON of the rules given."""
    for what, v in (("allow", allow), ("allow_cidr", allow_cidr), ("deny", deny)):
        if isinstance(v, str):
            raise TypeError(f"{what}: want a list of strings, not one string")
    out: Dict[str, Any] = {}
    if allow:
        out["allow"] = list(allow)
    if allow_cidr:
        out["allowCidr"] = list(allow_cidr)
    if deny:
        out["deny"] = list(deny)
    if resolve:
        out["resolve"] = dict(resolve)
    return out


def parse_size(size: Union[int, str, None]) -> Optional[int]:
    """Returns a size in bytes: an int as is, or a string such as "512M",
    "2G", "1.5GiB" (powers of 1024, as ``runbox up --memory``)."""
    if size is None or isinstance(size, int):
        return size
    m = _SIZE.match(size)
    if not m:
        raise errors.InvalidArgument(f"size {size!r}: want bytes, or a number with K, M, G or T")
    power = " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * (1024**power))


class Client:
    """A connection to a ``runbox serve`` server, as one tenant.

    Args:
        host: the server's URL, ``http://HOST:PORT`` or ``https://...``
            (default: ``$RUNBOX_HOST``, else ``http://127.0.0.1:7070``).
        token: a bearer token from ``runbox token create`` (default:
            ``$RUNBOX_TOKEN``).
        ssl_context: the TLS settings (CA) for an ``https://`` server.
        timeout: seconds to wait for the answer of a call that runs no
            command (create, list, file calls, ...).
        headroom: seconds added to a command's timeout and grace for the
            call's own deadline, so the sandbox's deadline always wins.
        reconnect_window: seconds a running exec is followed through a
            broken connection or a server restart before
            :class:`~runbox.SandboxLost` is raised.

    Each call opens its own HTTP/1.1 connection, so a Client may be shared
    by threads. Used as a context manager it closes nothing that outlives
    it: sandboxes stay until removed (or reaped by their ``idle_ttl``).
    """

    def __init__(
        self,
        host: Optional[str] = None,
        token: Optional[str] = None,
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        timeout: float = 120.0,
        headroom: float = 5.0,
        reconnect_window: float = 15.0,
    ) -> None:
        host = host or os.environ.get("RUNBOX_HOST") or DEFAULT_HOST
        token = token if token is not None else os.environ.get("RUNBOX_TOKEN", "")
        if not token:
            raise errors.Unauthenticated(
                "no token: pass token= or set RUNBOX_TOKEN (runbox token create --tenant NAME makes one)"
            )
        self._transport = Transport(host, token, ssl_context=ssl_context)
        self.host = self._transport.url
        self.timeout = timeout
        self.headroom = headroom
        self.reconnect_window = reconnect_window

    def __repr__(self) -> str:
        return f"<runbox.Client {self.host}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()

    def close(self) -> None:
        """Releases the client (it holds no connection between calls)."""

    def _call(self, method: str, req: Mapping[str, Any]) -> Dict[str, Any]:
        out, _ = self._transport.unary("runbox.v1.SandboxService/" + method, req, timeout=self.timeout)
        return out

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
        labels: Optional[Mapping[str, str]] = None,
        idle_ttl: Optional[float] = None,
        max_lifetime: Optional[float] = None,
        recreate: bool = False,
        allow: Optional[Sequence[str]] = None,
        allow_cidr: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
        resolve: Optional[Mapping[str, str]] = None,
        from_snapshot: Optional[str] = None,
    ) -> Sandbox:
        """Creates a sandbox and returns it once its runboxd answers.

        Args:
            provider: "local", "docker", "host", ... (default: the server's).
            name: an alias, unique within the tenant.
            image: the docker image.
            workdir: a directory on the server's machine under one of its
                ``--workdir-root`` s; default: a fresh empty workspace.
            memory: a memory limit in bytes, or "512M", "2G".
            pids: a limit on the number of processes.
            cpus: a CPU limit ("1.5" CPUs).
            network: "none", "host" or "private" (loopback only; egress
                through the sandbox's proxy by ``allow``).
            labels: key/value labels; :meth:`list` filters by them.
            idle_ttl: remove the sandbox after this many seconds with no
                exec running and no client attached.
            max_lifetime: remove it this many seconds after creation.
            recreate: when it is found lost, the next call that uses it gets
                a fresh sandbox with the same spec under the same id.
            allow: with network "private": names the sandbox may reach
                through its egress proxy ("pypi.org", "*.example.com", "*").
            allow_cidr: with network "private": address ranges that may be
                reached although not public (within the server's
                ``--allow-egress-cidr``).
            deny: names or ranges refused whatever ``allow`` says.
            resolve: names pinned to addresses on the host side.
            from_snapshot: one of the tenant's snapshots
                (:meth:`Sandbox.snapshot`) to start from: its files, and a
                copy of its workspace unless ``workdir`` is given.
        """
        req = self._create_request(
            provider=provider, name=name, image=image, workdir=workdir, memory=memory, pids=pids, cpus=cpus,
            network=network, labels=labels, idle_ttl=idle_ttl, max_lifetime=max_lifetime, recreate=recreate,
            from_snapshot=from_snapshot,
        )  # fmt: skip
        egress = egress_policy(allow, allow_cidr, deny, resolve)
        if egress:
            req["spec"]["egress"] = egress
        out = self._call("Create", req)
        return Sandbox(self, SandboxInfo.from_json(out.get("sandbox") or {}))

    def _create_request(
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
        labels: Optional[Mapping[str, str]] = None,
        idle_ttl: Optional[float] = None,
        max_lifetime: Optional[float] = None,
        recreate: bool = False,
        from_snapshot: Optional[str] = None,
    ) -> Dict[str, Any]:
        """The CreateSandboxRequest JSON of :meth:`create`'s arguments."""
        spec: Dict[str, Any] = {}
        fields = {
            "provider": provider,
            "name": name,
            "image": image,
            "workdir": workdir,
            "network": network,
            "memoryBytes": None if memory is None else str(parse_size(memory)),
            "pids": None if pids is None else str(pids),
            "cpus": cpus,
            "idleTtlMs": _ms(idle_ttl),
            "maxLifetimeMs": _ms(max_lifetime),
            "fromSnapshot": from_snapshot,
        }
        spec.update({k: v for k, v in fields.items() if v is not None})
        if labels:
            spec["labels"] = dict(labels)
        if recreate:
            spec["recreate"] = True
        return {"spec": spec}

    def _get_info(self, id_or_name: str) -> SandboxInfo:
        out = self._call("Get", {"id": id_or_name})
        return SandboxInfo.from_json(out.get("sandbox") or {})

    def get(self, id_or_name: str) -> Sandbox:
        """Returns the tenant's sandbox with that id or name
        (:class:`~runbox.SandboxNotFound` if it has none)."""
        return Sandbox(self, self._get_info(id_or_name))

    def list(self, labels: Optional[Mapping[str, str]] = None) -> List[Sandbox]:
        """Returns the tenant's sandboxes, oldest first; with ``labels``,
        only those carrying every one of them."""
        out = self._call("List", {"labels": dict(labels)} if labels else {})
        return [Sandbox(self, SandboxInfo.from_json(s)) for s in out.get("sandboxes") or []]

    def snapshots(self) -> List[Snapshot]:
        """The tenant's snapshots, oldest first."""
        out = self._call("ListSnapshots", {})
        return [Snapshot.from_json(s) for s in out.get("snapshots") or []]

    def delete_snapshot(self, name: str) -> None:
        """Deletes one of the tenant's snapshots (:class:`~runbox.InvalidSpec`
        if it has none of that name). local sandboxes made from it keep
        working; docker refuses (:class:`~runbox.FailedPrecondition`) while
        one exists."""
        self._call("DeleteSnapshot", {"name": name})

    def remove(self, id_or_name: str, force: bool = False) -> None:
        """Removes a sandbox, stopping its execs with the stop protocol. A
        lost sandbox needs ``force=True``."""
        req: Dict[str, Any] = {"id": id_or_name}
        if force:
            req["force"] = True
        self._call("Delete", req)
