"""runbox: run an AI agent's shell commands in sandboxes, from Python.

This is the client of a ``runbox serve`` server, in the standard library
alone (Python 3.9+). A command that times out or is cancelled dies with
every process it spawned, and the sandbox lives on for the next command:
exact exit codes, stdout and stderr kept apart, and an exception (never
"exit 1, empty output") when a sandbox really is gone.

Quick start::

    import runbox

    client = runbox.Client()          # $RUNBOX_HOST and $RUNBOX_TOKEN
    with client.create(idle_ttl=600) as sb:
        res = sb.run("make test", timeout=600, cwd="/workspace")
        print(res.exit_code, res.timed_out, res.stdout, res.stderr)

        with sb.start("npm run build", timeout=300) as p:   # stream output
            for chunk in p:
                print(chunk.stream, chunk.text, end="")
        print(p.result.exit_code)

        sb.files.write("notes/a.txt", "hello\\n")
        sb.files.upload_dir("./repo", "/workspace/repo")

Also: ``sb.popen(...)`` (a :class:`Popen`, the ``subprocess.Popen``
interface, for frameworks), ``merge_output=True`` on ``run``/``start``
(stdout and stderr in the order read: ``Result.merged``),
:mod:`runbox.aio` (the same API on asyncio) and :func:`local` (this
machine's sandboxes through the CLI and their runboxd's socket: no server,
no token).

Main names:

- :class:`Client` -- ``create``, ``get``, ``list``, ``remove`` sandboxes.
- :class:`Sandbox` -- ``run`` (one call, returns a :class:`Result`),
  ``start`` (a :class:`Process` streaming :class:`Chunk` s, with
  ``cancel``, ``signal``, stdin), ``attach`` (re-attach to an exec by id
  from a sequence number), ``cancel``, ``signal``, ``execs``, ``files``
  (:class:`Files`: ``read``, ``write``, ``stat``, ``list``, ``mkdir``,
  ``remove``, ``move``, ``upload_dir``, ``download_dir``), ``remove``.
- :class:`Result` -- exit_code, signal, timed_out, cancelled, duration,
  stdout/stderr (text) and stdout_raw/stderr_raw (bytes), dropped counts,
  spill paths.
- Exceptions in :mod:`runbox.errors`, all subclasses of
  :class:`RunboxError`, chosen from the server's error code and
  ``Runbox-Error`` tag: :class:`SandboxLost`, :class:`SandboxNotFound`
  (a :class:`NotFound`), :class:`Unauthenticated`, :class:`InvalidSpec`
  (an :class:`InvalidArgument`), :class:`QuotaExceeded` (a
  :class:`ResourceExhausted`), :class:`Unavailable`, ...

Timeouts: a command's ``timeout`` is enforced in the sandbox. The Python
call waits ``timeout + grace + headroom`` before giving up, so the sandbox's
deadline always comes first and the Result says ``timed_out``. A
``KeyboardInterrupt`` during ``run`` cancels the exec in the sandbox, then
propagates. A broken connection is retried (``run``) or re-attached
(``Process``) with the same exec id, so no command runs twice and no output
chunk is delivered twice.

The wire protocol is Connect over HTTP/1.1 with JSON (unary calls are one
POST; streams are enveloped messages); see docs/serve.md and docs/python.md
in the runbox repository.
"""

from .client import DEFAULT_HOST, Client
# Every exception class, as errors.__all__ lists them (re-exported below).
from . import errors
from .errors import *  # noqa: F401,F403
from .files import Files
from .models import ArchiveStats, Chunk, ExecInfo, ExposedPort, FileInfo, Gap, Result, SandboxInfo, Snapshot
from .process import Process
from .popen import DEVNULL, PIPE, STDOUT, Popen
from .local import Local, local
from .sandbox import DEFAULT_GRACE, Sandbox

__version__ = "0.1.0"

__all__ = [
    "Client",
    "DEFAULT_HOST",
    "DEFAULT_GRACE",
    "Sandbox",
    "Process",
    "Popen",
    "Local",
    "local",
    "PIPE",
    "STDOUT",
    "DEVNULL",
    "Files",
    "Result",
    "Chunk",
    "Gap",
    "SandboxInfo",
    "ExposedPort",
    "Snapshot",
    "FileInfo",
    "ArchiveStats",
    "ExecInfo",
]
__all__ += errors.__all__
