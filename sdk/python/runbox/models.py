"""The values the SDK returns: results, output chunks, sandboxes, files.

All are frozen dataclasses built from the server's JSON answers (protobuf's
JSON mapping: lowerCamelCase names, 64-bit integers as strings, bytes as
base64, zero values left out).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

__all__ = ["Result", "Chunk", "Gap", "SandboxInfo", "FileInfo", "ArchiveStats", "ExecInfo"]


def _int(m: Mapping[str, Any], key: str) -> int:
    v = m.get(key)
    return int(v) if v is not None else 0


def _bytes(m: Mapping[str, Any], key: str) -> bytes:
    v = m.get(key)
    return base64.b64decode(v) if v else b""


def _text_or_raw(m: Mapping[str, Any], key: str) -> str:
    """A string field, or its ``*Raw`` bytes twin decoded as a file name."""
    if m.get(key):
        return str(m[key])
    raw = _bytes(m, key + "Raw")
    return os.fsdecode(raw) if raw else ""


@dataclass(frozen=True)
class Result:
    """How an exec ended: exit status, why it stopped, and its output.

    A non-zero exit, a timeout or a cancel is a result, not an exception;
    an exception means runbox could not tell how the command ended.

    Attributes:
        id: the exec's id.
        exit_code: the command's own status, or 128+N when signal N killed
            it (143 after SIGTERM, 137 after SIGKILL).
        signal: the signal that killed the leader ("TERM", "KILL"), or "".
        timed_out: the exec's timeout stopped it.
        cancelled: a cancel stopped it.
        idle_timed_out: its idle timeout (no output for that long) stopped it.
        oom_killed: the sandbox's memory limit killed one of its processes.
        duration: the leader's run time in seconds, on the sandbox's clock.
        stdout_raw, stderr_raw: each stream's head and tail, exact bytes.
        stdout_dropped, stderr_dropped: bytes left out between head and tail.
        stdout_bytes, stderr_bytes: every byte each stream produced.
        stdout_spill, stderr_spill: paths in the sandbox holding the full
            output, when it was spilled.
        spill_truncated: the spill budget ran out before the output did.
        killed: processes the stop protocol signalled.
        survivors: processes still alive after the stop protocol (normally 0).
        pid: the leader's pid in the sandbox (information only).
        cwd: the session's directory after the exec (session execs).
        cwd_fallback_from: the session directory that no longer existed.
        stream_gaps, stream_lost: gaps in streamed output and the bytes they
            held (set by the SDK for streamed execs; see :class:`Gap`).
        recreated: the sandbox had been lost and was replaced before this
            exec ran (its spec asked for ``recreate``).
        merged_raw: with ``merge_output=True`` (``run`` and ``start``),
            stdout and stderr together in the order they were read: the
            head and tail of that stream, as stdout_raw keeps its own.
        merged_dropped: bytes left out between merged_raw's head and tail.
    """

    id: str
    exit_code: int = 0
    signal: str = ""
    timed_out: bool = False
    cancelled: bool = False
    idle_timed_out: bool = False
    oom_killed: bool = False
    duration: float = 0.0
    stdout_raw: bytes = b""
    stderr_raw: bytes = b""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stdout_spill: str = ""
    stderr_spill: str = ""
    spill_truncated: bool = False
    killed: int = 0
    survivors: int = 0
    pid: int = 0
    cwd: str = ""
    cwd_fallback_from: str = ""
    stream_gaps: int = 0
    stream_lost: int = 0
    recreated: bool = False
    merged_raw: Optional[bytes] = None
    merged_dropped: int = 0

    @property
    def stdout(self) -> str:
        """stdout as text (UTF-8; invalid bytes become U+FFFD)."""
        return self.stdout_raw.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        """stderr as text (UTF-8; invalid bytes become U+FFFD)."""
        return self.stderr_raw.decode("utf-8", errors="replace")

    @property
    def merged(self) -> str:
        """stdout and stderr in the order read, as text (``merge_output``),
        else stdout followed by stderr."""
        if self.merged_raw is None:
            return self.stdout + self.stderr
        return self.merged_raw.decode("utf-8", errors="replace")

    @property
    def output(self) -> str:
        """stdout followed by stderr, as text; in the order read when the
        exec was run with ``merge_output=True``."""
        return self.merged

    @property
    def ok(self) -> bool:
        """The command exited by itself with status 0."""
        return self.exit_code == 0 and not (self.timed_out or self.cancelled or self.idle_timed_out)

    @classmethod
    def from_json(cls, m: Mapping[str, Any], **extra: Any) -> "Result":
        """Builds a Result from a ``runbox.v1.Result`` JSON object."""
        return cls(
            id=str(m.get("id", "")),
            exit_code=_int(m, "exitCode"),
            signal=str(m.get("signal", "")),
            timed_out=bool(m.get("timedOut")),
            cancelled=bool(m.get("cancelled")),
            idle_timed_out=bool(m.get("idleTimedOut")),
            oom_killed=bool(m.get("oomKilled")),
            duration=_int(m, "durationUs") / 1e6,
            stdout_raw=_bytes(m, "stdout"),
            stderr_raw=_bytes(m, "stderr"),
            stdout_dropped=_int(m, "stdoutDropped"),
            stderr_dropped=_int(m, "stderrDropped"),
            stdout_bytes=_int(m, "stdoutBytes"),
            stderr_bytes=_int(m, "stderrBytes"),
            stdout_spill=str(m.get("stdoutSpill", "")),
            stderr_spill=str(m.get("stderrSpill", "")),
            spill_truncated=bool(m.get("spillTruncated")),
            killed=_int(m, "killed"),
            survivors=_int(m, "survivors"),
            pid=_int(m, "pid"),
            cwd=_text_or_raw(m, "cwd"),
            cwd_fallback_from=_text_or_raw(m, "cwdFallbackFrom"),
            **extra,
        )


@dataclass(frozen=True)
class Chunk:
    """A piece of an exec's output, as read.

    Attributes:
        stream: "stdout" or "stderr".
        seq: the chunk's sequence number in the exec (1, 2, ...), shared by
            both streams, so the merged order is the order read.
        data: the bytes.
    """

    stream: str
    seq: int
    data: bytes

    @property
    def text(self) -> str:
        """data as text (UTF-8; invalid bytes become U+FFFD; a character
        split across two chunks shows as two replacement characters)."""
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Gap:
    """Output that was no longer in the sandbox's replay ring when a
    re-attaching stream reached it: chunks ``from_seq`` to ``to_seq - 1``,
    holding ``bytes`` bytes. Only a client disconnected for longer than the
    ring holds (1 MiB a stream) sees one; the Result's head and tail and the
    spill files are not affected."""

    from_seq: int
    to_seq: int
    bytes: int


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the server describes it.

    Attributes:
        id: the server's id ("sb-..."), stable across a recreate.
        name: its alias, or "".
        provider: "host", "local", "docker", ...
        state: "ready", or "lost" (its runboxd is gone; see lost_reason).
        lost_reason: why it was found lost.
        labels: its labels.
        created_at, last_used_at: Unix times in seconds.
        recreated: times a lost sandbox was replaced (spec ``recreate``).
        running_execs: execs the server knows to be running in it.
        provider_id: the provider's own id (a container's name, ...).
        spec: the spec it was created with, as the server's JSON (its
            ``egress`` is the policy in force after :meth:`Sandbox.set_egress`).
        exposed_ports: the ports reachable through the server's port route
            (:meth:`Sandbox.expose`), ascending.
        paused: the sandbox is paused (:meth:`Sandbox.pause`).
    """

    id: str
    name: str = ""
    provider: str = ""
    state: str = ""
    lost_reason: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    last_used_at: float = 0.0
    recreated: int = 0
    running_execs: int = 0
    provider_id: str = ""
    spec: Dict[str, Any] = field(default_factory=dict)
    exposed_ports: List[int] = field(default_factory=list)
    paused: bool = False

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> "SandboxInfo":
        """Builds a SandboxInfo from a ``runbox.v1.Sandbox`` JSON object."""
        spec = dict(m.get("spec") or {})
        state = str(m.get("state", ""))
        return cls(
            id=str(m.get("id", "")),
            name=str(m.get("name", "")),
            provider=str(m.get("provider", "")),
            state=state.replace("SANDBOX_STATE_", "").lower(),
            lost_reason=str(m.get("lostReason", "")),
            labels=dict(spec.get("labels") or {}),
            created_at=_int(m, "createdAtUnixMs") / 1e3,
            last_used_at=_int(m, "lastUsedAtUnixMs") / 1e3,
            recreated=_int(m, "recreated"),
            running_execs=_int(m, "runningExecs"),
            provider_id=str(m.get("providerId", "")),
            spec=spec,
            exposed_ports=[int(p) for p in m.get("exposedPorts") or []],
            paused=bool(m.get("paused", False)),
        )


@dataclass(frozen=True)
class Snapshot:
    """One of the tenant's snapshots (:meth:`Sandbox.snapshot`).

    Attributes:
        name: unique within the tenant; pass it as ``from_snapshot``.
        provider: the provider that took it (sandboxes from it use it too).
        sandbox_id: the sandbox it was taken of.
        created_at: Unix time in seconds.
        workspace: it holds a copy of the sandbox's workspace.
        bytes: the disk it takes, where the provider knows.
    """

    name: str
    provider: str = ""
    sandbox_id: str = ""
    created_at: float = 0.0
    workspace: bool = False
    bytes: int = 0

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> "Snapshot":
        """Builds a Snapshot from a ``runbox.v1.Snapshot`` JSON object."""
        return cls(
            name=str(m.get("name", "")),
            provider=str(m.get("provider", "")),
            sandbox_id=str(m.get("sandboxId", "")),
            created_at=_int(m, "createdAtUnixMs") / 1e3,
            workspace=bool(m.get("workspace", False)),
            bytes=_int(m, "bytes"),
        )


@dataclass(frozen=True)
class ExposedPort:
    """A sandbox port reachable through the server's route
    (:meth:`Sandbox.expose`).

    Attributes:
        port: the TCP port on the sandbox's loopback.
        url: the route, ``BASE/sandboxes/{id}/ports/{port}/``: send the
            tenant's token as ``Authorization: Bearer TOKEN``.
        signed_url: the route with a signature bound to the tenant, the
            sandbox and the port: it needs no token until ``expires_at``
            (give it to a browser; its later requests carry a cookie).
        expires_at: the signed URL's expiry, Unix seconds.
    """

    port: int
    url: str
    signed_url: str
    expires_at: float


@dataclass(frozen=True)
class FileInfo:
    """A path in a sandbox.

    Attributes:
        path: the path (relative to the listed directory in listings).
        type: "regular", "directory", "symlink" or "other".
        mode: permission bits plus setuid, setgid and sticky (as chmod).
        size: bytes.
        mtime_ns: modification time, nanoseconds since the epoch.
        link_target: a symlink's target.
    """

    path: str
    type: str = ""
    mode: int = 0
    size: int = 0
    mtime_ns: int = 0
    link_target: str = ""

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> "FileInfo":
        """Builds a FileInfo from a ``runbox.v1.FileInfo`` JSON object."""
        return cls(
            path=os.fsdecode(_bytes(m, "path")),
            type=str(m.get("type", "")).replace("FILE_TYPE_", "").lower(),
            mode=_int(m, "mode"),
            size=_int(m, "size"),
            mtime_ns=_int(m, "mtimeNs"),
            link_target=os.fsdecode(_bytes(m, "linkTarget")),
        )


@dataclass(frozen=True)
class ArchiveStats:
    """What an upload extracted: entries by kind, bytes, paths deleted."""

    files: int = 0
    dirs: int = 0
    links: int = 0
    bytes: int = 0
    deleted: int = 0

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> "ArchiveStats":
        """Builds ArchiveStats from a ``PutArchiveResponse`` JSON object."""
        return cls(*(_int(m, k) for k in ("files", "dirs", "links", "bytes", "deleted")))


@dataclass(frozen=True)
class ExecInfo:
    """An exec the sandbox's runboxd keeps (running, or retained after).

    Attributes:
        id: the exec's id.
        state: "starting", "running", "stopping" or "exited".
        command: its command line.
        pid: the leader's pid in the sandbox.
        live_processes: processes of the exec still alive.
        result: its Result once it exited.
    """

    id: str
    state: str = ""
    command: str = ""
    pid: int = 0
    live_processes: int = 0
    result: Optional[Result] = None

    @classmethod
    def from_json(cls, m: Mapping[str, Any]) -> "ExecInfo":
        """Builds an ExecInfo from a ``runbox.v1.ExecInfo`` JSON object."""
        res = m.get("result")
        return cls(
            id=str(m.get("id", "")),
            state=str(m.get("state", "")).replace("EXEC_STATE_", "").lower(),
            command=_text_or_raw(m, "command"),
            pid=_int(m, "pid"),
            live_processes=_int(m, "liveProcesses"),
            result=Result.from_json(res) if res else None,
        )
