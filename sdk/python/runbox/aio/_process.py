"""A running exec, followed on asyncio (see :class:`runbox.Process`)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Dict, List, Mapping, Optional, Union

from .. import errors
from .._connect import ConnectionLost
from .._follow import MAX_BACKOFF, MIN_BACKOFF, Follower, HeadTail, b64e, chunk, transient
from ..models import Chunk, Gap, Result
from ._transport import AsyncServerStream

if TYPE_CHECKING:  # pragma: no cover
    from . import AsyncSandbox

__all__ = ["AsyncProcess"]


class AsyncProcess:
    """An exec started with :meth:`AsyncSandbox.start` or found with
    :meth:`AsyncSandbox.attach`: :class:`runbox.Process` on asyncio.

    ``async for chunk in p`` yields its output; ``await p.wait()`` returns
    its Result. Cancelling the task awaiting :meth:`wait` cancels the exec
    in the sandbox (stop protocol) before the cancellation propagates; so
    does leaving an ``async with p:`` block with an exception. Dropping the
    connection (:meth:`close`) leaves the exec running; :meth:`attach` it
    again by id.
    """

    def __init__(self, sandbox: "AsyncSandbox", exec_id: str, run_request: Optional[Dict[str, Any]] = None,
                 stream_output: bool = True, from_seq: int = 1, read_timeout: Optional[float] = None,
                 merge: Optional[HeadTail] = None) -> None:
        self.sandbox = sandbox
        self.id = exec_id
        self._state = Follower(exec_id, from_seq, merge)
        self._run = run_request
        self._stream_output = stream_output
        self._read_timeout = read_timeout
        self._stream: Optional[AsyncServerStream] = None
        self._reconnects = 0

    @property
    def pid(self) -> int:
        """The leader's pid in the sandbox, once started."""
        return self._state.pid

    @property
    def attached(self) -> bool:
        """True when the stream attached to an exec that already existed."""
        return self._state.attached

    @property
    def gaps(self) -> List[Gap]:
        """Gaps in the streamed output."""
        return self._state.gaps

    @property
    def recreated(self) -> bool:
        """True when the server replaced the lost sandbox before the exec ran."""
        return self._state.recreated

    @property
    def last_seq(self) -> int:
        """The sequence number of the last chunk delivered (0: none yet)."""
        return self._state.last_seq

    @property
    def result(self) -> Optional[Result]:
        """The exec's Result once its exit was seen, else None."""
        return self._state.result

    @property
    def done(self) -> bool:
        """Whether the exec's exit was seen."""
        return self._state.result is not None

    @property
    def reconnects(self) -> int:
        """How many times the stream was opened again after a failure."""
        return self._reconnects

    def __aiter__(self) -> AsyncIterator[Chunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[Chunk]:
        while self._state.result is None:
            c = chunk(await self._next_event())
            if c is not None:
                yield c

    async def wait(self) -> Result:
        """Reads the exec to its end and returns its Result. A cancelled
        wait cancels the exec, then propagates."""
        try:
            while self._state.result is None:
                await self._next_event()
        except asyncio.CancelledError:
            self.close()
            await self.sandbox._cancel_quietly(self.id)
            raise
        return self._state.result

    async def cancel(self, grace: Optional[float] = None, *, wait: bool = False) -> Union[bool, Result]:
        """Stops the exec with the stop protocol; with ``wait=True``, waits
        for the stop and returns the Result."""
        known = await self.sandbox.cancel(self.id, grace=grace)
        if not wait:
            return known
        return await self.wait()

    async def signal(self, sig: Union[int, str]) -> int:
        """Sends a signal to every process of the exec."""
        return await self.sandbox.signal(self.id, sig)

    async def write_stdin(self, data: Union[bytes, str]) -> None:
        """Writes to the exec's stdin (start it with ``stdin_stream=True``)."""
        await self.sandbox._exec_call("WriteStdin", {"id": self.id, "data": b64e(data)})

    async def close_stdin(self) -> None:
        """Closes the exec's stdin."""
        await self.sandbox._exec_call("CloseStdin", {"id": self.id})

    def close(self) -> None:
        """Drops the connection; the exec runs on."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    async def __aenter__(self) -> "AsyncProcess":
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is not None and self._state.result is None:
                await self.sandbox._cancel_quietly(self.id)
        finally:
            self.close()

    def __repr__(self) -> str:
        res = self._state.result
        return f"<runbox.aio.AsyncProcess {self.id} in {self.sandbox.id}: {f'exit {res.exit_code}' if res else 'running'}>"

    async def _start(self) -> None:
        while not self._state.seen and self._state.result is None:
            ev = await self._next_event()
            if ev.get("output") is not None:
                raise errors.InternalError("output before the exec's started event")

    async def _open(self) -> AsyncServerStream:
        if self._run is not None and not self._state.seen:
            return await self.sandbox._exec_stream("Run", self._run, self._read_timeout)
        req = {"id": self.id, "streamOutput": self._stream_output, "fromSeq": str(self._state.last_seq + 1)}
        return await self.sandbox._exec_stream("Attach", req, self._read_timeout)

    async def _next_event(self) -> Mapping[str, Any]:
        broke_at: Optional[float] = None
        backoff = MIN_BACKOFF
        deadlines = 0
        window = self.sandbox._sync.client.reconnect_window
        while True:
            try:
                if self._stream is None:
                    self._stream = await self._open()
                    self._state.opened(self._stream.headers)
                ev = await self._stream.__anext__()
            except StopAsyncIteration:
                self._stream = None
                err: errors.RunboxError = ConnectionLost(
                    f"exec {self.id}: the stream ended before the exec's exit event"
                )
            except errors.DeadlineExceeded as e:
                self.close()
                deadlines += 1
                if deadlines > 1:
                    raise
                err = ConnectionLost(str(e))
            except errors.RunboxError as e:
                self.close()
                if not transient(e):
                    lost = self._state.lost(e)
                    if lost is e:
                        raise
                    raise lost from e
                err = e
            except BaseException:
                self.close()
                raise
            else:
                if self._state.accept(ev):
                    if self._state.result is not None:
                        self.close()
                    return ev
                continue
            now = time.monotonic()
            if broke_at is None:
                broke_at = now
            left = window - (now - broke_at)
            if left <= 0:
                raise errors.SandboxLost(f"exec {self.id}: no answer for {window:g}s: {err}") from err
            await asyncio.sleep(min(backoff * (0.5 + random.random() / 2), left))
            backoff = min(backoff * 2, MAX_BACKOFF)
            self._reconnects += 1
