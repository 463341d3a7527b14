"""Exceptions raised by the runbox SDK.

Every error the server answers becomes an instance of a class below, chosen
from the answer's ``Runbox-Error`` tag (the response header of a unary call,
the end-of-stream metadata of a streaming one) and, when there is no tag,
from the Connect error code. Message text is never parsed: the message is
for people, the class is for code.

The classes mirror the Go client's sentinel errors (``runbox.ErrSandboxLost``
is :class:`SandboxLost`, ``runbox.ErrSandboxNotFound`` is
:class:`SandboxNotFound`, ...), grouped under the Connect code they travel
with, so ``except NotFound`` catches every kind of "no such thing"::

    RunboxError
    ├── Unauthenticated          no token, or an unknown or revoked one
    ├── NotFound                 code not_found
    │   ├── SandboxNotFound      the tenant has no sandbox with that id or name
    │   ├── ExecNotFound         the sandbox has no exec with that id
    │   ├── SessionNotFound      no shell session with that name
    │   └── FileNotFound         no such path in the sandbox
    ├── InvalidArgument          code invalid_argument
    │   ├── InvalidSpec          a bad field, named in the message
    │   └── InvalidPath          a path runbox cannot use (empty, NUL byte, ...)
    ├── ResourceExhausted        code resource_exhausted
    │   ├── QuotaExceeded        a tenant quota; the message names the limit
    │   └── TooLarge             a request over a size limit
    ├── FailedPrecondition       code failed_precondition
    │   ├── ExecCancelled        the exec id was cancelled before it started
    │   ├── SpawnError           the command could not be started
    │   ├── NotRunning           the exec has exited already
    │   ├── IsDirectory          a file operation met a directory
    │   └── NotDirectory         a path used as a directory is not one
    ├── PermissionDenied         code permission_denied
    │   ├── FilePermission       the sandbox's file system refused access
    │   └── EscapesRoot          a path would leave the root it must stay in
    ├── AlreadyExists            code already_exists (a sandbox name taken)
    │   └── ExecIDConflict       an exec id reused with a different spec
    ├── SandboxLost              the sandbox's runboxd is gone
    ├── Unavailable              the server (or its connection to the
    │   │                        sandbox) did not answer: retry or re-attach
    │   └── DeadlineExceeded     no answer within the call's own deadline
    └── InternalError            code internal, unknown, ... (a bug: report it)
"""

from __future__ import annotations

from typing import Dict, Mapping, Optional, Sequence, Type

__all__ = [
    "RunboxError",
    "Unauthenticated",
    "NotFound",
    "SandboxNotFound",
    "ExecNotFound",
    "SessionNotFound",
    "FileNotFound",
    "InvalidArgument",
    "InvalidSpec",
    "InvalidPath",
    "ResourceExhausted",
    "QuotaExceeded",
    "TooLarge",
    "FailedPrecondition",
    "ExecCancelled",
    "SpawnError",
    "NotRunning",
    "SandboxPaused",
    "Unsupported",
    "IsDirectory",
    "NotDirectory",
    "PermissionDenied",
    "FilePermission",
    "EscapesRoot",
    "AlreadyExists",
    "ExecIDConflict",
    "SandboxLost",
    "Unavailable",
    "DeadlineExceeded",
    "InternalError",
]


class RunboxError(Exception):
    """Base class of every error the SDK raises.

    Attributes:
        code: the Connect error code (``"not_found"``, ``"unavailable"``, ...),
            or ``""`` for an error the SDK raised itself before any answer.
        tag: the ``Runbox-Error`` tag the server sent (``"sandbox-lost"``,
            ...), or ``""``.
        message: the server's message (or the SDK's own).
        http_status: the HTTP status of the answer, when there was one.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        tag: str = "",
        http_status: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.tag = tag
        self.http_status = http_status

    def __str__(self) -> str:
        label = self.tag or self.code
        return f"{label}: {self.message}" if label else self.message


class Unauthenticated(RunboxError):
    """No bearer token, or an unknown or revoked one (HTTP 401)."""


class NotFound(RunboxError):
    """Something named in the request does not exist (code ``not_found``)."""


class SandboxNotFound(NotFound):
    """The tenant has no sandbox with that id or name.

    Another tenant's sandbox answers exactly like one that never existed.
    """


class ExecNotFound(NotFound):
    """The sandbox knows no exec with that id (never started, or forgotten)."""


class SessionNotFound(NotFound):
    """No shell session has that name."""


class FileNotFound(NotFound):
    """A path in the sandbox does not exist."""


class InvalidArgument(RunboxError):
    """The request was malformed (code ``invalid_argument``)."""


class InvalidSpec(InvalidArgument):
    """A field of the request is wrong; the message names it."""


class InvalidPath(InvalidArgument):
    """A path cannot be used: empty, a NUL byte, an over-long component."""


class ResourceExhausted(RunboxError):
    """A limit was reached (code ``resource_exhausted``)."""


class QuotaExceeded(ResourceExhausted):
    """A tenant quota (sandboxes, running execs) is used up."""


class TooLarge(ResourceExhausted):
    """A request, or a part of it, is over its size limit (7 MiB a message)."""


class FailedPrecondition(RunboxError):
    """The request cannot be done in the current state."""


class ExecCancelled(FailedPrecondition):
    """The exec id was cancelled before it started, so it never ran."""


class SpawnError(FailedPrecondition):
    """The command could not be started (missing binary, bad directory)."""


class NotRunning(FailedPrecondition):
    """The exec has exited, so it takes no stdin and no signal."""


class SandboxPaused(FailedPrecondition):
    """The sandbox is paused (:meth:`Sandbox.pause`): it takes no new exec
    until :meth:`Sandbox.resume`. Nothing is lost."""


class Unsupported(RunboxError):
    """The sandbox's provider cannot do this (a snapshot of a host sandbox)."""


class IsDirectory(FailedPrecondition):
    """A file operation met a directory."""


class NotDirectory(FailedPrecondition):
    """A path used as a directory is not one."""


class PermissionDenied(RunboxError):
    """The call is not allowed (code ``permission_denied``)."""


class FilePermission(PermissionDenied):
    """The sandbox's file system refused access to a path."""


class EscapesRoot(PermissionDenied):
    """A path, archive entry or link would reach outside its root.

    Nothing was written outside the root.
    """


class AlreadyExists(RunboxError):
    """Something with that name exists already (a sandbox name)."""


class ExecIDConflict(AlreadyExists):
    """An exec with that id exists and was started with a different spec."""


class SandboxLost(RunboxError):
    """The sandbox's runboxd is gone: not the command's fault.

    Delete the sandbox (``force=True``) or create it with ``recreate=True``
    so the next call gets a fresh one. Also raised when an exec could not be
    followed for the whole reconnect window.
    """


class Unavailable(RunboxError):
    """The server, or its connection to the sandbox, did not answer.

    Transient: the server may be restarting. Running execs are unaffected;
    a :class:`~runbox.Process` re-attaches by itself within its window.
    """


class DeadlineExceeded(Unavailable):
    """No answer came within the call's own deadline.

    For an exec, that deadline is its timeout plus grace plus headroom, so
    this means the server stopped answering, not that the command ran long.
    """


class InternalError(RunboxError):
    """The server failed in a way that is none of the above (a bug)."""


_BY_TAG: Dict[str, Type[RunboxError]] = {
    "unauthenticated": Unauthenticated,
    "sandbox-not-found": SandboxNotFound,
    "exec-not-found": ExecNotFound,
    "session-not-found": SessionNotFound,
    "file-not-found": FileNotFound,
    "invalid-spec": InvalidSpec,
    "invalid-path": InvalidPath,
    "quota-exceeded": QuotaExceeded,
    "too-large": TooLarge,
    "cancelled": ExecCancelled,
    "spawn": SpawnError,
    "not-running": NotRunning,
    "is-directory": IsDirectory,
    "not-directory": NotDirectory,
    "permission": FilePermission,
    "escapes-root": EscapesRoot,
    "exec-id-conflict": ExecIDConflict,
    "sandbox-lost": SandboxLost,
    "sandbox-paused": SandboxPaused,
    "unsupported": Unsupported,
    "name-in-use": AlreadyExists,
    "internal": InternalError,
}

_BY_CODE: Dict[str, Type[RunboxError]] = {
    "unauthenticated": Unauthenticated,
    "not_found": NotFound,
    "invalid_argument": InvalidArgument,
    "out_of_range": InvalidArgument,
    # An untagged resource_exhausted is a message over the size limit,
    # refused before it was read.
    "resource_exhausted": TooLarge,
    "failed_precondition": FailedPrecondition,
    "permission_denied": PermissionDenied,
    "already_exists": AlreadyExists,
    "unavailable": Unavailable,
    "deadline_exceeded": DeadlineExceeded,
    "canceled": Unavailable,
    "aborted": Unavailable,
}

# Connect's mapping of an HTTP status to a code, for an answer that carries
# no Connect error body (a proxy's 502, say).
_HTTP_CODE: Dict[int, str] = {
    400: "internal",
    401: "unauthenticated",
    403: "permission_denied",
    404: "unimplemented",
    429: "unavailable",
    502: "unavailable",
    503: "unavailable",
    504: "unavailable",
}


def code_for_http_status(status: int) -> str:
    """Returns the Connect code of an HTTP status without an error body."""
    return _HTTP_CODE.get(status, "unknown")


def metadata_value(metadata: Mapping[str, Sequence[str]], key: str) -> str:
    """Returns the first value of key in metadata, matching case-insensitively."""
    want = key.lower()
    for k, values in metadata.items():
        if k.lower() == want and values:
            return values[0]
    return ""


def from_wire(
    code: str, message: str, tag: str = "", http_status: Optional[int] = None
) -> RunboxError:
    """Builds the exception for an error the server answered.

    The ``Runbox-Error`` tag decides when present; otherwise the Connect
    code does. An unknown tag or code gives a plain :class:`RunboxError`
    subclass chosen by code, or :class:`InternalError`.
    """
    cls = _BY_TAG.get(tag) or _BY_CODE.get(code) or InternalError
    return cls(message, code=code, tag=tag, http_status=http_status)
