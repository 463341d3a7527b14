"""A ``subprocess.Popen``-compatible handle on an exec, for frameworks that
drive commands through one: ``poll()``, ``wait(timeout)``, ``returncode``,
``stdout``/``stderr`` as real file objects (with ``fileno()``, so
``select`` and non-blocking reads work), ``kill()``/``terminate()`` that
stop the exec's whole process tree, ``communicate()``.

A thread of this process reads the exec's event stream (with the SDK's
re-attach on a broken connection) and writes each chunk to an OS pipe, in
the order read; ``stderr=runbox.STDOUT`` sends both streams to one pipe.
The pipes reach end of file when the exec's exit is known, even if a
background child still holds the exec's own output open (the sandbox stops
reading it shortly after the leader exits), so a reader never hangs on it.
"""

from __future__ import annotations

import errno
import os
import select
import subprocess
import threading
from typing import IO, TYPE_CHECKING, Any, List, Optional, Tuple, Union

from . import errors
from .models import Result
from .sandbox import _SIGNALS, _signal_number

if TYPE_CHECKING:  # pragma: no cover
    from .process import Process

__all__ = ["Popen", "PIPE", "STDOUT", "DEVNULL"]

#: As in :mod:`subprocess`: a pipe to read the stream from.
PIPE = subprocess.PIPE
#: As in :mod:`subprocess`: ``stderr=STDOUT`` merges stderr into stdout's pipe, in order.
STDOUT = subprocess.STDOUT
#: As in :mod:`subprocess`: discard the stream.
DEVNULL = subprocess.DEVNULL


def returncode_of(res: Result) -> int:
    """A Result's exit status as subprocess reports it: -N when signal N
    killed the command's leader, else its exit code."""
    if res.signal:
        n = _SIGNALS.get(res.signal.upper().removeprefix("SIG"))
        if n:
            return -n
    return res.exit_code


class Popen:
    """An exec with the interface of :class:`subprocess.Popen`.

    Made by :meth:`Sandbox.popen`. ``stdout`` and ``stderr`` are file
    objects reading OS pipes (binary unless ``text=True``), or None for a
    stream not asked for (``DEVNULL``, or stderr merged into stdout).
    ``stdin`` is a writer calling :meth:`Process.write_stdin` when started
    with ``stdin=PIPE``. ``returncode`` is None until the exit is known,
    then -N when signal N killed the leader, else the exit status;
    :attr:`result` is the full :class:`~runbox.Result` (``timed_out``,
    ``cancelled``, ``recreated``, ...). As with subprocess, read the pipes
    (or use :meth:`communicate`) when output may exceed a pipe's buffer.
    """

    def __init__(self, process: "Process", args: Any, stdout: Optional[int] = PIPE,
                 stderr: Optional[int] = PIPE, stdin: Optional[int] = None, text: bool = False) -> None:
        self.process = process
        self.args = args
        self.pid = process.pid
        self.returncode: Optional[int] = None
        self.stdin: Optional[_StdinWriter] = _StdinWriter(process) if stdin == PIPE else None
        self._error: Optional[BaseException] = None
        self._done = threading.Event()
        # Set by kill/terminate/cancel: output no one reads is dropped then,
        # so a full pipe cannot keep the exit from being seen.
        self._stopping = threading.Event()
        fds: List[int] = []
        self.stdout, out_w = _pipe(stdout == PIPE, text, fds)
        self.stderr, err_w = _pipe(stderr == PIPE, text, fds)
        if stderr == STDOUT:
            err_w = out_w
        self._fds = fds
        self._writers = {"stdout": out_w, "stderr": err_w}
        self._thread = threading.Thread(target=self._pump, name=f"runbox-popen-{process.id}", daemon=True)
        self._thread.start()

    @property
    def result(self) -> Optional[Result]:
        """The exec's Result once its exit is known, else None."""
        return self.process.result

    def _pump(self) -> None:
        try:
            for c in self.process:
                fd = self._writers.get(c.stream)
                if fd is not None and not _write_all(fd, c.data, self._stopping):
                    self._writers = {k: (None if v == fd else v) for k, v in self._writers.items()}
        except BaseException as e:  # noqa: BLE001 -- handed to wait()
            self._error = e
        finally:
            for fd in self._fds:
                os.close(fd)
            res = self.process.result
            if res is not None:
                self.returncode = returncode_of(res)
            self.process.close()
            self._done.set()

    def poll(self) -> Optional[int]:
        """The returncode if the exec's exit is known, else None. Raises
        what following the exec raised (say :class:`~runbox.SandboxLost`)."""
        if self._done.is_set():
            return self.wait()
        return None

    def wait(self, timeout: Optional[float] = None) -> int:
        """Waits for the exit and returns the returncode; raises
        :class:`subprocess.TimeoutExpired` after timeout seconds (the exec
        runs on)."""
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        if self._error is not None:
            raise self._error
        assert self.returncode is not None
        return self.returncode

    def communicate(self, input: Union[bytes, str, None] = None,
                    timeout: Optional[float] = None) -> Tuple[Any, Any]:
        """Writes input to stdin (if given) and closes it, reads stdout and
        stderr to their end, waits, and returns ``(stdout, stderr)``."""
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
            self.stdin.close()
        got: List[Any] = [None, None]

        def read(i: int, f: Optional[IO[Any]]) -> None:
            if f is not None:
                got[i] = f.read()
                f.close()

        readers = [threading.Thread(target=read, args=(i, f), daemon=True) for i, f in enumerate((self.stdout, self.stderr))]
        for t in readers:
            t.start()
        self.wait(timeout)
        for t in readers:
            t.join()
        return got[0], got[1]

    def send_signal(self, sig: Union[int, str]) -> None:
        """Sends a signal to every process of the exec (nothing once it has
        exited)."""
        try:
            self.process.signal(_signal_number(sig))
        except errors.NotRunning:
            pass

    def terminate(self) -> None:
        """Stops the exec's whole process tree with the stop protocol:
        SIGTERM, the exec's grace, SIGKILL."""
        if not self._done.is_set():
            self._stopping.set()
            self.process.cancel()

    def kill(self) -> None:
        """SIGKILLs the exec's whole process tree at once."""
        if not self._done.is_set():
            self._stopping.set()
            self.process.cancel(grace=-1)

    def cancel(self, grace: Optional[float] = None, *, wait: bool = True) -> Optional[Result]:
        """Stops the exec with the stop protocol and, with ``wait``
        (default), returns its Result once the stop is done."""
        if not self._done.is_set():
            self._stopping.set()
            self.process.cancel(grace=grace)
        if not wait:
            return None
        self.wait()
        return self.result

    def __enter__(self) -> "Popen":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is not None:
                self.kill()
            self.wait()
        finally:
            for f in (self.stdout, self.stderr):
                if f is not None:
                    f.close()

    def __repr__(self) -> str:
        return f"<runbox.Popen: returncode: {self.returncode} args: {self.args!r}>"


class _StdinWriter:
    """A Popen's stdin: writes go to the exec's stdin (started with
    ``stdin_stream``)."""

    def __init__(self, process: "Process") -> None:
        self._process = process
        self.closed = False

    def write(self, data: Union[bytes, str]) -> int:
        self._process.write_stdin(data)
        return len(data)

    def flush(self) -> None:
        """Writes are sent at once; nothing to flush."""

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self._process.close_stdin()
            except errors.NotRunning:
                pass


def _pipe(want: bool, text: bool, fds: List[int]) -> Tuple[Optional[IO[Any]], Optional[int]]:
    """A reading file object and the write end's descriptor, or (None,
    None) when the stream is not wanted."""
    if not want:
        return None, None
    r, w = os.pipe()
    os.set_blocking(w, False)
    fds.append(w)
    if text:
        return open(r, "r", encoding="utf-8", errors="replace"), w
    return open(r, "rb", buffering=0), w


def _write_all(fd: int, data: bytes, stopping: threading.Event) -> bool:
    """Writes data to fd (non-blocking), waiting while the pipe is full;
    False once the reader closed its end, or the pipe is full while the
    exec is being stopped (what no one reads then is dropped)."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            if stopping.is_set():
                return False
            select.select([], [fd], [], 0.1)
            continue
        except OSError as e:
            if e.errno == errno.EPIPE:
                return False
            raise
        view = view[n:]
    return True
