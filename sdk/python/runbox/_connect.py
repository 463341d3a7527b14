"""The Connect protocol over HTTP/1.1 with http.client (JSON codec).

Unary calls are one POST with ``Content-Type: application/json``; the answer
is the response message, or an HTTP error status with a JSON body
``{"code", "message"}`` and the error's metadata as response headers.

Streaming calls (``Content-Type: application/connect+json``) frame every
message as an envelope: one flags byte, a 4-byte big-endian length, then the
JSON. The response is a sequence of envelopes; the last one has flag 0x02
(end of stream) and carries ``{"error": {...}, "metadata": {...}}``, where a
failed call's code, message and ``Runbox-Error`` tag are. A client-streaming
call sends its messages as envelopes in a chunked request body.

Each call opens its own connection and closes it when done: nothing is
pooled, so a broken connection never poisons the next call.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import ssl
import struct
import urllib.parse
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from . import errors

FLAG_COMPRESSED = 0x01
FLAG_END_STREAM = 0x02
_PREFIX = struct.Struct(">BI")
# The server sends messages of up to 7 MiB; refuse to buffer anything far
# bigger (a corrupt length).
MAX_MESSAGE_BYTES = 16 << 20
USER_AGENT = "runbox-python/0.1"


class ConnectionLost(errors.Unavailable):
    """The connection failed before the call's answer was complete.

    Raised by the transport; the SDK retries calls that are safe to retry
    and re-attaches streams, and only lets it through when it gives up.
    ``sent`` is False when the connection could not even be opened (so
    the request certainly did not reach the server).
    """

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message, code="unavailable")
        self.sent = sent


def envelope(message: Mapping[str, Any], flags: int = 0) -> bytes:
    """Frames one JSON message as a Connect envelope."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return _PREFIX.pack(flags, len(data)) + data


AUTH_MAGIC = b"RUNBOXD-AUTH 1 "
AUTH_OK = b"RUNBOXD-AUTH OK\n"
AUTH_REFUSED = b"RUNBOXD-AUTH REFUSED "


def auth_preamble(secret: bytes) -> bytes:
    """The line that opens every connection to a sandbox's runboxd: the
    sandbox's secret, as internal/daemonauth's dialer sends it."""
    return AUTH_MAGIC + secret.hex().encode() + b"\n"


def auth_answer(line: bytes, socket_path: str) -> None:
    """Checks runboxd's answer to the preamble; a refusal or anything else
    is :class:`~runbox.Unauthenticated` (a closed connection:
    :class:`ConnectionLost`, the daemon may be restarting or gone)."""
    if line == AUTH_OK:
        return
    if not line:
        raise ConnectionLost(f"{socket_path}: runboxd closed the connection during the handshake", sent=False)
    if line.startswith(AUTH_REFUSED):
        reason = line[len(AUTH_REFUSED):].decode(errors="replace").strip()
        raise errors.Unauthenticated(f"{socket_path}: runboxd refused the sandbox's secret: {reason}")
    raise errors.Unauthenticated(f"{socket_path}: not a runboxd answer to the handshake: {line[:80]!r}")


class _UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a sandbox's unix socket, authenticated with its secret
    before the first request."""

    def __init__(self, path: str, secret: bytes, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path, self.secret = path, secret

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            try:
                s.connect(self.path)
            except (FileNotFoundError, ConnectionRefusedError) as e:
                # Nothing listens: the sandbox's runboxd is gone.
                raise errors.SandboxLost(f"{self.path}: runboxd does not answer: {e}") from e
            s.sendall(auth_preamble(self.secret))
            line = b""
            while not line.endswith(b"\n") and len(line) < 256:
                part = s.recv(1)
                if not part:
                    break
                line += part
        except BaseException:
            s.close()
            raise
        try:
            auth_answer(line, self.path)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Transport:
    """Makes Connect calls to one server with one bearer token, or, with
    ``unix_socket`` and ``secret``, to one sandbox's runboxd directly."""

    def __init__(
        self,
        host: str,
        token: str,
        ssl_context: Optional[ssl.SSLContext] = None,
        connect_timeout: float = 30.0,
        unix_socket: Optional[str] = None,
        secret: Optional[bytes] = None,
    ) -> None:
        self.unix_socket, self.secret = unix_socket, secret
        if "://" not in host:
            host = "http://" + host
        u = urllib.parse.urlsplit(host)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise errors.InvalidArgument(
                f"host {host!r}: want http://HOST:PORT or https://HOST:PORT"
            )
        self.scheme = u.scheme
        self.hostname = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base_path = u.path.rstrip("/")
        self.url = f"{u.scheme}://{u.netloc}{self.base_path}"
        self.token = token
        self.ssl_context = ssl_context
        self.connect_timeout = connect_timeout

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        """Opens a connection; timeout bounds every later read (None: none)."""
        if self.unix_socket is not None:
            conn: http.client.HTTPConnection = _UnixConnection(self.unix_socket, self.secret or b"", self.connect_timeout)
        elif self.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                self.hostname, self.port, timeout=self.connect_timeout, context=ctx
            )
        else:
            conn = http.client.HTTPConnection(
                self.hostname, self.port, timeout=self.connect_timeout
            )
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise ConnectionLost(f"connect to {self.unix_socket or self.url}: {e}", sent=False) from e
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        if conn.sock.family in (socket.AF_INET, socket.AF_INET6):
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _headers(self, content_type: str, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        h = {
            "Content-Type": content_type,
            "Connect-Protocol-Version": "1",
            "User-Agent": USER_AGENT,
        }
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if extra:
            h.update(extra)
        return h

    def _path(self, procedure: str) -> str:
        return f"{self.base_path}/{procedure}"

    def unary(
        self,
        procedure: str,
        message: Mapping[str, Any],
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = 60.0,
    ) -> Tuple[Dict[str, Any], http.client.HTTPMessage]:
        """Calls a unary procedure ("runbox.v1.SandboxService/Create").

        Returns the response message and the response headers. Raises the
        :mod:`runbox.errors` class of a failed call, :class:`ConnectionLost`
        when the connection failed, or
        :class:`~runbox.errors.DeadlineExceeded` when no answer came within
        timeout seconds (None waits for ever).
        """
        body = json.dumps(message, separators=(",", ":")).encode()
        conn = self._connection(timeout)
        try:
            try:
                conn.request(
                    "POST",
                    self._path(procedure),
                    body=body,
                    headers=self._headers("application/json", headers),
                )
                resp = conn.getresponse()
                data = resp.read()
            except socket.timeout as e:
                raise errors.DeadlineExceeded(
                    f"{procedure}: no answer within {timeout:g}s", code="deadline_exceeded"
                ) from e
            except (OSError, http.client.HTTPException) as e:
                raise ConnectionLost(f"{procedure}: {e!r}") from e
            if resp.getheader("Content-Encoding", "identity") == "gzip":
                data = gzip.decompress(data)
            if resp.status != 200:
                raise _unary_error(resp, data)
            try:
                out = json.loads(data) if data else {}
            except ValueError as e:
                raise errors.InternalError(f"{procedure}: answer is not JSON: {e}") from e
            return out, resp.headers
        finally:
            conn.close()

    def server_stream(
        self,
        procedure: str,
        message: Mapping[str, Any],
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
    ) -> "ServerStream":
        """Opens a server-streaming call and returns its stream of messages.

        timeout bounds each wait for the next bytes (None: no bound).
        """
        return self._open_stream(procedure, envelope(message), headers, timeout)

    def client_stream(
        self,
        procedure: str,
        messages: Iterable[Mapping[str, Any]],
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = 300.0,
    ) -> Dict[str, Any]:
        """Calls a client-streaming procedure: messages go out as they are
        produced (chunked), and the one response message is returned."""
        body = (envelope(m) for m in messages)
        stream = self._open_stream(procedure, body, headers, timeout)
        out: Optional[Dict[str, Any]] = None
        try:
            for msg in stream:
                out = msg
        finally:
            stream.close()
        if out is None:
            raise errors.InternalError(f"{procedure}: the stream ended without a response message")
        return out

    def _open_stream(
        self,
        procedure: str,
        body: Any,
        headers: Optional[Mapping[str, str]],
        timeout: Optional[float],
    ) -> "ServerStream":
        conn = self._connection(timeout)
        h = self._headers("application/connect+json", headers)
        try:
            try:
                if isinstance(body, bytes):
                    conn.request("POST", self._path(procedure), body=body, headers=h)
                else:
                    conn.request(
                        "POST", self._path(procedure), body=body, headers=h, encode_chunked=True
                    )
                resp = conn.getresponse()
            except socket.timeout as e:
                raise errors.DeadlineExceeded(
                    f"{procedure}: no answer within {timeout:g}s", code="deadline_exceeded"
                ) from e
            except (OSError, http.client.HTTPException) as e:
                raise ConnectionLost(f"{procedure}: {e!r}") from e
            if resp.status != 200:
                try:
                    data = resp.read()
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectionLost(f"{procedure}: {e!r}") from e
                raise _unary_error(resp, data)
        except BaseException:
            conn.close()
            raise
        return ServerStream(procedure, conn, resp, timeout)


class ServerStream:
    """The messages of a streaming response, as an iterator of dicts.

    Iteration ends at the end-of-stream envelope, raising the call's error
    if it carries one. A connection that breaks first raises
    :class:`ConnectionLost`; one that stays silent past the read timeout
    raises :class:`~runbox.errors.DeadlineExceeded`.
    """

    def __init__(
        self,
        procedure: str,
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        timeout: Optional[float],
    ) -> None:
        self.procedure = procedure
        self.headers = resp.headers
        self.trailers: Dict[str, List[str]] = {}
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self._timeout = timeout
        self._gzip = resp.getheader("Connect-Content-Encoding", "identity") == "gzip"
        self._done = False

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self

    def __next__(self) -> Dict[str, Any]:
        if self._done:
            raise StopIteration
        try:
            flags, data = self._read_envelope()
        except BaseException:
            self.close()
            raise
        if flags & FLAG_END_STREAM:
            self._done = True
            self.close()
            self._end(data)
            raise StopIteration
        try:
            msg: Dict[str, Any] = json.loads(data)
            return msg
        except ValueError as e:
            self.close()
            raise errors.InternalError(f"{self.procedure}: message is not JSON: {e}") from e

    def _read_envelope(self) -> Tuple[int, bytes]:
        prefix = self._read_exact(_PREFIX.size, at_start=True)
        flags, length = _PREFIX.unpack(prefix)
        if length > MAX_MESSAGE_BYTES:
            raise errors.TooLarge(f"{self.procedure}: a {length}-byte message is over the limit")
        data = self._read_exact(length, at_start=False)
        if flags & FLAG_COMPRESSED:
            if not self._gzip:
                raise errors.InternalError(f"{self.procedure}: compressed message without an encoding")
            data = gzip.decompress(data)
        return flags, data

    def _read_exact(self, n: int, at_start: bool) -> bytes:
        buf = b""
        while len(buf) < n:
            try:
                part = self._resp.read(n - len(buf))
            except socket.timeout as e:
                raise errors.DeadlineExceeded(
                    f"{self.procedure}: nothing received for {self._timeout:g}s",
                    code="deadline_exceeded",
                ) from e
            except (OSError, http.client.HTTPException, ValueError) as e:
                # ValueError: http.client reading a closed response.
                raise ConnectionLost(f"{self.procedure}: stream broken: {e!r}") from e
            if not part:
                where = "before its end" if at_start and not buf else "inside a message"
                raise ConnectionLost(f"{self.procedure}: stream ended {where}")
            buf += part
        return buf

    def _end(self, data: bytes) -> None:
        try:
            end = json.loads(data) if data else {}
        except ValueError as e:
            raise errors.InternalError(f"{self.procedure}: end of stream is not JSON: {e}") from e
        self.trailers = end.get("metadata") or {}
        err = end.get("error")
        if err:
            tag = errors.metadata_value(self.trailers, "Runbox-Error")
            raise errors.from_wire(err.get("code", "unknown"), err.get("message", ""), tag, 200)

    def close(self) -> None:
        """Drops the connection (the call's effects on the server stay)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def _unary_error(resp: http.client.HTTPResponse, data: bytes) -> errors.RunboxError:
    """The exception for a non-200 answer."""
    return error_answer(resp.status, resp.reason, resp.getheader("Runbox-Error", "") or "", data)


def error_answer(status: int, reason: str, tag: str, data: bytes) -> errors.RunboxError:
    """The exception for a non-200 answer: its JSON error body, or the
    Connect code of its HTTP status when it has none."""
    code, message = "", ""
    try:
        body = json.loads(data)
        if isinstance(body, dict):
            code = str(body.get("code", ""))
            message = str(body.get("message", ""))
    except ValueError:
        pass
    if not code:
        code = errors.code_for_http_status(status)
        message = message or f"HTTP {status} {reason}: {data[:200]!r}"
    return errors.from_wire(code, message, tag, status)
