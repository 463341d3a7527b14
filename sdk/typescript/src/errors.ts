// Errors of the runbox SDK. Every error the server answers becomes an
// instance of a class below, chosen from the answer's Runbox-Error tag (a
// unary call's response header, a stream's end-of-stream metadata) and,
// when there is no tag, from the Connect error code. Message text is never
// parsed: the message is for people, the class is for code. The classes
// mirror the Go client's sentinel errors and the Python SDK's exceptions.

import { Code, ConnectError } from "@connectrpc/connect";

/** Base class of every error the SDK throws (an aborted call throws the signal's reason instead). */
export class RunboxError extends Error {
  /** The Connect code ("not_found", "unavailable", ...), or "" for an error the SDK made itself. */
  readonly code: string;
  /** The Runbox-Error tag the server sent ("sandbox-lost", ...), or "". */
  readonly tag: string;
  /** The server's message (or the SDK's own), without the code. */
  readonly rawMessage: string;

  constructor(message: string, opts: { code?: string; tag?: string; cause?: unknown } = {}) {
    const label = opts.tag || opts.code;
    super(label ? `${label}: ${message}` : message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = new.target.name;
    this.code = opts.code ?? "";
    this.tag = opts.tag ?? "";
    this.rawMessage = message;
  }
}

/** No bearer token, or an unknown or revoked one. */
export class Unauthenticated extends RunboxError {}
/** Something named in the request does not exist (code not_found). */
export class NotFound extends RunboxError {}
/** The tenant has no sandbox with that id or name (another tenant's answers the same). */
export class SandboxNotFound extends NotFound {}
/** The sandbox knows no exec with that id. */
export class ExecNotFound extends NotFound {}
/** No shell session has that name. */
export class SessionNotFound extends NotFound {}
/** A path in the sandbox does not exist. */
export class FileNotFound extends NotFound {}
/** The request was malformed (code invalid_argument). */
export class InvalidArgument extends RunboxError {}
/** A field of the request is wrong; the message names it. */
export class InvalidSpec extends InvalidArgument {}
/** A path cannot be used: empty, a NUL byte, an over-long component. */
export class InvalidPath extends InvalidArgument {}
/** A limit was reached (code resource_exhausted). */
export class ResourceExhausted extends RunboxError {}
/** A tenant quota (sandboxes, running execs) is used up. */
export class QuotaExceeded extends ResourceExhausted {}
/** A request, or a part of it, is over its size limit. */
export class TooLarge extends ResourceExhausted {}
/** The request cannot be done in the current state (code failed_precondition). */
export class FailedPrecondition extends RunboxError {}
/** The exec id was cancelled before it started, so it never ran. */
export class ExecCancelled extends FailedPrecondition {}
/** The command could not be started (missing binary, bad directory). */
export class SpawnError extends FailedPrecondition {}
/** The exec has exited, so it takes no stdin and no signal. */
export class NotRunning extends FailedPrecondition {}
/** The sandbox is paused (runbox pause): it takes no new exec until resumed. */
export class SandboxPaused extends FailedPrecondition {}
/** The sandbox's provider cannot do this (a snapshot of a host sandbox). */
export class Unsupported extends RunboxError {}
/** A file operation met a directory. */
export class IsDirectory extends FailedPrecondition {}
/** A path used as a directory is not one. */
export class NotDirectory extends FailedPrecondition {}
/** The call is not allowed (code permission_denied). */
export class PermissionDenied extends RunboxError {}
/** The sandbox's file system refused access to a path. */
export class FilePermission extends PermissionDenied {}
/** A path, archive entry or link would reach outside its root; nothing was written outside it. */
export class EscapesRoot extends PermissionDenied {}
/** Something with that name exists already (a sandbox name). */
export class AlreadyExists extends RunboxError {}
/** An exec with that id exists and was started with a different spec. */
export class ExecIDConflict extends AlreadyExists {}
/**
 * The sandbox's runboxd is gone: not the command's fault. Remove the sandbox
 * (force) or create it with recreate so the next call gets a fresh one. Also
 * thrown when an exec could not be followed for the whole reconnect window.
 */
export class SandboxLost extends RunboxError {}
/** The server, or its connection to the sandbox, did not answer: transient. */
export class Unavailable extends RunboxError {}
/** No answer came within the call's own deadline (timeout + grace + headroom). */
export class DeadlineExceeded extends Unavailable {}
/** The server failed in a way that is none of the above (a bug: report it). */
export class InternalError extends RunboxError {}

type ErrorClass = new (message: string, opts?: { code?: string; tag?: string; cause?: unknown }) => RunboxError;

const byTag: Record<string, ErrorClass> = {
  unauthenticated: Unauthenticated,
  "sandbox-not-found": SandboxNotFound,
  "exec-not-found": ExecNotFound,
  "session-not-found": SessionNotFound,
  "file-not-found": FileNotFound,
  "invalid-spec": InvalidSpec,
  "invalid-path": InvalidPath,
  "quota-exceeded": QuotaExceeded,
  "too-large": TooLarge,
  cancelled: ExecCancelled,
  spawn: SpawnError,
  "not-running": NotRunning,
  "is-directory": IsDirectory,
  "not-directory": NotDirectory,
  permission: FilePermission,
  "escapes-root": EscapesRoot,
  "exec-id-conflict": ExecIDConflict,
  "sandbox-lost": SandboxLost,
  "sandbox-paused": SandboxPaused,
  unsupported: Unsupported,
  "name-in-use": AlreadyExists,
  internal: InternalError,
};

const byCode: Partial<Record<Code, ErrorClass>> = {
  [Code.Unauthenticated]: Unauthenticated,
  [Code.NotFound]: NotFound,
  [Code.InvalidArgument]: InvalidArgument,
  [Code.OutOfRange]: InvalidArgument,
  // An untagged resource_exhausted is a message over the size limit,
  // refused before it was read.
  [Code.ResourceExhausted]: TooLarge,
  [Code.FailedPrecondition]: FailedPrecondition,
  [Code.PermissionDenied]: PermissionDenied,
  [Code.AlreadyExists]: AlreadyExists,
  [Code.Unavailable]: Unavailable,
  [Code.DeadlineExceeded]: DeadlineExceeded,
  [Code.Canceled]: Unavailable,
  [Code.Aborted]: Unavailable,
};

/** The wire name of a Connect code ("not_found"). */
export function codeName(code: Code): string {
  return (Code[code] ?? "unknown").replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/**
 * Whether err is a failure of the connection (or a server going away), not
 * an answer: the call may be made again on a new connection. As the Go
 * client decides: an untagged unavailable, aborted or canceled, or a code
 * a broken connection gives (unknown, internal) with a network error as
 * its cause rather than an error body from the server.
 */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return false;
  if (err.metadata.get("runbox-error")) return false;
  switch (err.code) {
    case Code.Unavailable:
    case Code.Aborted:
    case Code.Canceled: // a stream reset by a dying connection (a caller's own abort is told apart before)
      return true;
    case Code.Unknown:
    case Code.Internal:
    case Code.DeadlineExceeded:
      return err.cause !== undefined && err.cause !== null;
  }
  return false;
}

/**
 * Turns whatever a call threw into the error the SDK throws: the caller's
 * abort reason when its signal fired, a RunboxError chosen by tag, then
 * code, for a ConnectError, and anything else as it is.
 */
export function toRunboxError(err: unknown, signal?: AbortSignal): unknown {
  if (signal?.aborted) return signal.reason;
  if (err instanceof RunboxError || !(err instanceof ConnectError)) return err;
  const tag = err.metadata.get("runbox-error") ?? "";
  const cls = byTag[tag] ?? byCode[err.code] ?? InternalError;
  return new cls(err.rawMessage, { code: codeName(err.code), tag, cause: err });
}
