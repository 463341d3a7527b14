"""A running exec: stream its output, cancel it, signal it, re-attach.

A :class:`Process` follows one exec by id over RunboxService's streaming
``Run`` (until the exec is known to have started) and ``Attach`` (after).
When the connection breaks, or the server restarts, it re-attaches from the
sequence number after the last chunk it delivered, so every chunk is
delivered exactly once, and the exec itself is never run twice (its id is
an idempotency key).
"""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Mapping, Optional, Union

from . import errors
from ._connect import ConnectionLost, ServerStream
from ._follow import MAX_BACKOFF, MIN_BACKOFF, Follower, HeadTail, b64e, chunk, transient
from .models import Chunk, Gap, Result

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Process"]

# Kept for code that imported them from here.
_transient = transient
_b64e = b64e


class Process:
    """An exec started with :meth:`Sandbox.start` or found with
    :meth:`Sandbox.attach`.

    Iterate over it for its output :class:`~runbox.Chunk` s, as they are
    read, in order; :meth:`wait` returns its :class:`~runbox.Result`. The
    exec runs in the sandbox whatever happens to this object: dropping the
    connection (:meth:`close`, a network failure, a server restart) does not
    stop it, and :meth:`Sandbox.attach` with :attr:`id` and ``from_seq``
    picks it up again, from this process or another.

    Used as a context manager, it cancels the exec if the block ends with an
    exception (a ``KeyboardInterrupt`` among them), and closes the
    connection in any case::

        with sb.start("make test", timeout=600) as p:
            for chunk in p:
                print(chunk.text, end="")
        print(p.result.exit_code)
    """

    def __init__(
        self,
        sandbox: "Sandbox",
        exec_id: str,
        run_request: Optional[Dict[str, Any]] = None,
        stream_output: bool = True,
        from_seq: int = 1,
        read_timeout: Optional[float] = None,
        merge: Optional[HeadTail] = None,
    ) -> None:
        self.sandbox = sandbox
        self.id = exec_id
        self._state = Follower(exec_id, from_seq, merge)
        self._run = run_request
        self._stream_output = stream_output
        self._read_timeout = read_timeout
        self._stream: Optional[ServerStream] = None
        self._reconnects = 0

    @property
    def pid(self) -> int:
        """The leader's pid in the sandbox, once started (information only)."""
        return self._state.pid

    @property
    def attached(self) -> bool:
        """True when the stream attached to an exec that already existed."""
        return self._state.attached

    @property
    def gaps(self) -> List[Gap]:
        """Gaps in the streamed output (see :class:`~runbox.Gap`)."""
        return self._state.gaps

    @property
    def recreated(self) -> bool:
        """True when the server replaced the lost sandbox before the exec
        ran (its spec asked for ``recreate``); the Result says it too."""
        return self._state.recreated

    # -- what the caller sees -------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The sequence number of the last chunk delivered (0: none yet).
        Re-attach from ``last_seq + 1`` to continue after it."""
        return self._state.last_seq

    @property
    def result(self) -> Optional[Result]:
        """The exec's Result once its exit was seen, else None."""
        return self._state.result

    @property
    def _result(self) -> Optional[Result]:
        return self._state.result

    @property
    def done(self) -> bool:
        """Whether the exec's exit was seen."""
        return self._state.result is not None

    @property
    def reconnects(self) -> int:
        """How many times the stream was opened again after a failure."""
        return self._reconnects

    def __iter__(self) -> Iterator[Chunk]:
        """Yields output chunks until the exec exits (then :attr:`result` is
        set). Raises :class:`~runbox.SandboxLost` when the exec cannot be
        followed for the client's whole reconnect window."""
        while self._result is None:
            c = chunk(self._next_event())
            if c is not None:
                yield c

    def wait(self) -> Result:
        """Reads the exec to its end and returns its Result (output not
        iterated yet is consumed; the Result keeps its head and tail)."""
        for _ in self:
            pass
        assert self._result is not None
        return self._result

    def cancel(self, grace: Optional[float] = None, *, wait: bool = False) -> Union[bool, Result]:
        """Stops the exec with the stop protocol: SIGTERM to every process it
        started, ``grace`` seconds (default: the exec's own), SIGKILL. The
        stream then delivers the Result (``cancelled`` set). Returns False
        when the server did not know the id (a tombstone now refuses it);
        with ``wait=True``, waits for the stop and returns the Result (the
        exec's own, if it had ended first)."""
        known = self.sandbox.cancel(self.id, grace=grace)
        if not wait:
            return known
        return self.wait()

    def signal(self, sig: Union[int, str]) -> int:
        """Sends a signal (a number, or a name such as "INT" or "SIGINT") to
        every process of the exec; returns how many were signalled."""
        return self.sandbox.signal(self.id, sig)

    def write_stdin(self, data: Union[bytes, str]) -> None:
        """Writes to the exec's stdin (start it with ``stdin_stream=True``)."""
        self.sandbox._exec_call("WriteStdin", {"id": self.id, "data": b64e(data)})

    def close_stdin(self) -> None:
        """Closes the exec's stdin."""
        self.sandbox._exec_call("CloseStdin", {"id": self.id})

    def close(self) -> None:
        """Drops the connection. The exec runs on; attach to it again with
        ``sandbox.attach(p.id, from_seq=p.last_seq + 1)``."""
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is not None and self._result is None:
                try:
                    self.cancel()
                except errors.RunboxError:
                    pass
        finally:
            self.close()

    def __repr__(self) -> str:
        state = f"exit {self._result.exit_code}" if self._result else "running"
        return f"<runbox.Process {self.id} in {self.sandbox.id}: {state}>"

    # -- following the exec ---------------------------------------------------

    def _start(self) -> None:
        """Reads up to the started event, so that a refused exec (bad spec,
        spawn failure, a cancelled id) raises from start()."""
        while not self._state.seen and self._result is None:
            ev = self._next_event()
            if ev.get("output") is not None:
                # Output before started cannot happen; keep it for the iterator.
                raise errors.InternalError("output before the exec's started event")

    def _open(self) -> ServerStream:
        if self._run is not None and not self._state.seen:
            return self.sandbox._exec_stream("Run", self._run, self._read_timeout)
        return self.sandbox._exec_stream(
            "Attach",
            {"id": self.id, "streamOutput": self._stream_output, "fromSeq": str(self._state.last_seq + 1)},
            self._read_timeout,
        )

    def _next_event(self) -> Mapping[str, Any]:
        """The exec's next event, re-opening the stream as needed."""
        broke_at: Optional[float] = None
        backoff = MIN_BACKOFF
        deadlines = 0
        while True:
            try:
                if self._stream is None:
                    self._stream = self._open()
                    self._state.opened(self._stream.headers)
                ev = next(self._stream)
            except StopIteration:
                self._stream = None
                err: errors.RunboxError = ConnectionLost(
                    f"exec {self.id}: the stream ended before the exec's exit event"
                )
            except errors.DeadlineExceeded as e:
                self.close()
                deadlines += 1
                if deadlines > 1:
                    raise
                err = ConnectionLost(str(e))  # ask the server once more
            except errors.RunboxError as e:
                self.close()
                if not transient(e):
                    lost = self._state.lost(e)
                    if lost is e:
                        raise
                    raise lost from e
                err = e
            else:
                if self._accept(ev):
                    return ev
                continue
            now = time.monotonic()
            if broke_at is None:
                broke_at = now
            left = self.sandbox.client.reconnect_window - (now - broke_at)
            if left <= 0:
                raise errors.SandboxLost(
                    f"exec {self.id}: no answer for {self.sandbox.client.reconnect_window:g}s: {err}"
                ) from err
            time.sleep(min(backoff * (0.5 + random.random() / 2), left))
            backoff = min(backoff * 2, MAX_BACKOFF)
            self._reconnects += 1

    def _accept(self, ev: Mapping[str, Any]) -> bool:
        accepted = self._state.accept(ev)
        if self._state.result is not None:
            self.close()
        return accepted
