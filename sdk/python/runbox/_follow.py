"""What following an exec's event stream keeps, shared by the sync and the
async Process: the last sequence number delivered, gaps, the started and
exited events, the recreated flag, and the merged output."""

from __future__ import annotations

import base64
from typing import Any, Dict, List, Mapping, Optional

from . import errors
from ._connect import ConnectionLost
from .models import Chunk, Gap, Result

#: The response header by which the server says the sandbox was replaced.
RECREATED_HEADER = "Runbox-Sandbox-Recreated"

#: How much of the start and of the end of an output stream a Result keeps
#: by default (the sandbox's default, 32 KiB each).
DEFAULT_KEEP = 32 << 10

_STREAMS = {"STREAM_STDOUT": "stdout", "STREAM_STDERR": "stderr", 1: "stdout", 2: "stderr"}
MIN_BACKOFF = 0.05
MAX_BACKOFF = 1.0


def transient(err: errors.RunboxError) -> bool:
    """Whether err is a failure of the connection (or a server going away),
    not an answer: the call may be made again on a new connection."""
    if isinstance(err, ConnectionLost):
        return True
    return type(err) is errors.Unavailable and not err.tag


class HeadTail:
    """Keeps the first ``head`` and the last ``tail`` bytes of a stream and
    counts what is left out between them."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_cap, self.tail_cap = max(head, 0), max(tail, 0)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def write(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        over = len(self.tail) - self.tail_cap
        if over > 0:
            del self.tail[:over]
            self.dropped += over

    def value(self) -> bytes:
        return bytes(self.head + self.tail)


class Follower:
    """The state of one exec's event stream, whatever carries it."""

    def __init__(self, exec_id: str, from_seq: int = 1, merge: Optional[HeadTail] = None) -> None:
        self.id = exec_id
        self.pid = 0
        self.attached = False
        self.recreated = False
        self.gaps: List[Gap] = []
        self.last_seq = max(from_seq - 1, 0)
        self.seen = False
        self.result: Optional[Result] = None
        self.merge = merge

    def opened(self, headers: Any) -> None:
        """Notes what a freshly opened stream's response headers say."""
        if (headers.get(RECREATED_HEADER, "") or "") == "true":
            self.recreated = True

    def accept(self, ev: Mapping[str, Any]) -> bool:
        """Updates the state from ev; False for a chunk delivered already
        (replayed after a reconnect)."""
        if "started" in ev:
            st = ev["started"] or {}
            self.seen = True
            self.pid = int(st.get("pid", 0) or 0)
            self.attached = self.attached or bool(st.get("attached"))
        elif "output" in ev:
            out = ev["output"] or {}
            seq = int(out.get("seq", 0))
            if seq <= self.last_seq:
                return False
            self.last_seq = seq
            if self.merge is not None:
                self.merge.write(b64(out.get("data")))
        elif "gap" in ev:
            g = ev["gap"] or {}
            gap = Gap(int(g.get("fromSeq", 0)), int(g.get("toSeq", 0)), int(g.get("bytes", 0)))
            self.gaps.append(gap)
            if gap.to_seq > 0 and gap.to_seq - 1 > self.last_seq:
                self.last_seq = gap.to_seq - 1
        elif "exited" in ev:
            self.seen = True
            res = (ev["exited"] or {}).get("result") or {}
            extra: Dict[str, Any] = {}
            if self.merge is not None:
                extra = {"merged_raw": self.merge.value(), "merged_dropped": self.merge.dropped}
            self.result = Result.from_json(
                res,
                stream_gaps=len(self.gaps),
                stream_lost=sum(g.bytes for g in self.gaps),
                recreated=self.recreated,
                **extra,
            )
        return True

    def lost(self, e: errors.RunboxError) -> errors.RunboxError:
        """The error to raise for a refusal e of a stream that was open: an
        exec that vanished after it was seen means its sandbox lost it."""
        if self.seen and isinstance(e, errors.ExecNotFound):
            return errors.SandboxLost(
                f"exec {self.id} is gone from the sandbox (did its runboxd restart?): {e.message}",
                code=e.code,
                tag=e.tag,
            )
        return e


def chunk(ev: Mapping[str, Any]) -> Optional[Chunk]:
    """The output Chunk of an event, or None."""
    out = ev.get("output")
    if out is None:
        return None
    return Chunk(
        stream=_STREAMS.get(out.get("stream", ""), str(out.get("stream", ""))),
        seq=int(out.get("seq", 0)),
        data=b64(out.get("data")),
    )


def merge_buffer(merge_output: bool, head_bytes: Optional[int], tail_bytes: Optional[int]) -> Optional[HeadTail]:
    """The merged-output buffer a Process keeps, or None without merging."""
    if not merge_output:
        return None
    return HeadTail(DEFAULT_KEEP if head_bytes is None else head_bytes, DEFAULT_KEEP if tail_bytes is None else tail_bytes)


def b64(v: Optional[str]) -> bytes:
    return base64.b64decode(v) if v else b""


def b64e(data: Any) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode()
