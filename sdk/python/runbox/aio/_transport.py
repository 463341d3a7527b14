"""The Connect protocol over HTTP/1.1 on asyncio streams (JSON codec).

The same wire as :mod:`runbox._connect`, with asyncio's streams instead of
http.client: one connection per call, closed when the call is done, so a
cancelled task leaves nothing half-read behind. Bodies the server sends
with ``Content-Length``, chunked, or up to the end of the connection are
all read.
"""

from __future__ import annotations

import asyncio
import email.parser
import gzip
import http.client
import json
import ssl
from typing import Any, AsyncIterator, Dict, List, Mapping, Optional, Tuple

from .. import errors
from .._connect import (
    _PREFIX,
    FLAG_COMPRESSED,
    FLAG_END_STREAM,
    MAX_MESSAGE_BYTES,
    USER_AGENT,
    ConnectionLost,
    Transport,
    auth_answer,
    auth_preamble,
    envelope,
    error_answer,
)

_MAX_HEADER_BYTES = 64 << 10


class _Response:
    """A response's status and headers, and a reader of its body."""

    def __init__(self, procedure: str, status: int, reason: str, headers: http.client.HTTPMessage,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: Optional[float]) -> None:
        self.procedure, self.status, self.reason, self.headers = procedure, status, reason, headers
        self._reader, self._writer, self._timeout = reader, writer, timeout
        te = (headers.get("Transfer-Encoding") or "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("Content-Length")
        self._left: Optional[int] = int(cl) if cl is not None and not self._chunked else None
        self._chunk_left = 0
        self._eof = False

    async def _io(self, coro: Any) -> Any:
        try:
            return await asyncio.wait_for(coro, self._timeout)
        except asyncio.TimeoutError as e:
            raise errors.DeadlineExceeded(
                f"{self.procedure}: nothing received for {self._timeout:g}s", code="deadline_exceeded"
            ) from e
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            raise ConnectionLost(f"{self.procedure}: stream broken: {e!r}") from e

    async def read_some(self, n: int) -> bytes:
        """Up to n bytes of the body; b"" at its end."""
        if self._eof:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                line = await self._io(self._reader.readline())
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    await self._io(self._reader.readline())  # the blank line after the last chunk
                    self._eof = True
                    return b""
                self._chunk_left = size
            data: bytes = await self._io(self._reader.read(min(n, self._chunk_left)))
            if not data:
                raise ConnectionLost(f"{self.procedure}: stream ended inside a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await self._io(self._reader.readexactly(2))
            return data
        if self._left is not None:
            if self._left == 0:
                self._eof = True
                return b""
            n = min(n, self._left)
        data = await self._io(self._reader.read(n))
        if not data:
            if self._left:
                raise ConnectionLost(f"{self.procedure}: stream ended {self._left} bytes early")
            self._eof = True
        if self._left is not None:
            self._left -= len(data)
        return data

    async def read_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            part = await self.read_some(n - len(buf))
            if not part:
                raise ConnectionLost(f"{self.procedure}: stream ended {'inside a message' if buf else 'before its end'}")
            buf += part
        return buf

    async def read_all(self) -> bytes:
        parts: List[bytes] = []
        while True:
            part = await self.read_some(1 << 16)
            if not part:
                return b"".join(parts)
            parts.append(part)

    def close(self) -> None:
        self._writer.close()


class AsyncTransport:
    """Makes Connect calls on asyncio, to where a sync Transport points."""

    def __init__(self, sync: Transport) -> None:
        self.sync = sync

    async def _open(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        t = self.sync
        try:
            if t.unix_socket is not None:
                try:
                    reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(t.unix_socket), t.connect_timeout)
                except (FileNotFoundError, ConnectionRefusedError) as e:
                    raise errors.SandboxLost(f"{t.unix_socket}: runboxd does not answer: {e}") from e
                writer.write(auth_preamble(t.secret or b""))
                line = await asyncio.wait_for(reader.readline(), t.connect_timeout)
                try:
                    auth_answer(line, t.unix_socket)
                except BaseException:
                    writer.close()
                    raise
                return reader, writer
            ctx: Optional[ssl.SSLContext] = None
            if t.scheme == "https":
                ctx = t.ssl_context or ssl.create_default_context()
            return await asyncio.wait_for(asyncio.open_connection(t.hostname, t.port, ssl=ctx), t.connect_timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise ConnectionLost(f"connect to {t.unix_socket or t.url}: {e!r}", sent=False) from e

    async def _request(self, procedure: str, body: Any, content_type: str, headers: Optional[Mapping[str, str]],
                       timeout: Optional[float]) -> _Response:
        reader, writer = await self._open()
        try:
            h = self.sync._headers(content_type, headers)
            h["Host"] = self.sync.hostname or "localhost"
            h["Connection"] = "close"
            if isinstance(body, bytes):
                h["Content-Length"] = str(len(body))
            else:
                h["Transfer-Encoding"] = "chunked"
            head = f"POST {self.sync._path(procedure)} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
            try:
                if isinstance(body, bytes):
                    writer.write(head.encode("latin-1") + b"\r\n" + body)  # one segment
                else:
                    writer.write(head.encode("latin-1") + b"\r\n")
                    async for part in body:
                        writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                        await writer.drain()
                    writer.write(b"0\r\n\r\n")
                await writer.drain()
                raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            except asyncio.TimeoutError as e:
                raise errors.DeadlineExceeded(
                    f"{procedure}: no answer within {timeout:g}s", code="deadline_exceeded"
                ) from e
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
                raise ConnectionLost(f"{procedure}: {e!r}") from e
            if len(raw) > _MAX_HEADER_BYTES:
                raise errors.InternalError(f"{procedure}: response headers over {_MAX_HEADER_BYTES} bytes")
            status_line, _, rest = raw.decode("latin-1").partition("\r\n")
            parts = status_line.split(" ", 2)
            if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
                raise ConnectionLost(f"{procedure}: not an HTTP/1.1 answer: {status_line[:80]!r}")
            hdrs = email.parser.Parser(_class=http.client.HTTPMessage).parsestr(rest)
            return _Response(procedure, int(parts[1]), parts[2] if len(parts) > 2 else "", hdrs,  # type: ignore[arg-type]
                             reader, writer, timeout)
        except BaseException:
            writer.close()
            raise

    async def unary(self, procedure: str, message: Mapping[str, Any], headers: Optional[Mapping[str, str]] = None,
                    timeout: Optional[float] = 60.0) -> Tuple[Dict[str, Any], http.client.HTTPMessage]:
        """As :meth:`Transport.unary`."""
        body = json.dumps(message, separators=(",", ":")).encode()
        resp = await self._request(procedure, body, "application/json", headers, timeout)
        try:
            data = await resp.read_all()
        finally:
            resp.close()
        if resp.headers.get("Content-Encoding", "identity") == "gzip":
            data = gzip.decompress(data)
        if resp.status != 200:
            raise _error(resp, data)
        try:
            out = json.loads(data) if data else {}
        except ValueError as e:
            raise errors.InternalError(f"{procedure}: answer is not JSON: {e}") from e
        return out, resp.headers

    async def server_stream(self, procedure: str, message: Mapping[str, Any],
                            headers: Optional[Mapping[str, str]] = None,
                            timeout: Optional[float] = None) -> "AsyncServerStream":
        """As :meth:`Transport.server_stream`."""
        return await self._stream(procedure, envelope(message), headers, timeout)

    async def client_stream(self, procedure: str, messages: AsyncIterator[Mapping[str, Any]],
                            headers: Optional[Mapping[str, str]] = None,
                            timeout: Optional[float] = 300.0) -> Dict[str, Any]:
        """As :meth:`Transport.client_stream`, from an async iterator."""

        async def body() -> AsyncIterator[bytes]:
            async for m in messages:
                yield envelope(m)

        stream = await self._stream(procedure, body(), headers, timeout)
        out: Optional[Dict[str, Any]] = None
        try:
            async for msg in stream:
                out = msg
        finally:
            stream.close()
        if out is None:
            raise errors.InternalError(f"{procedure}: the stream ended without a response message")
        return out

    async def _stream(self, procedure: str, body: Any, headers: Optional[Mapping[str, str]],
                      timeout: Optional[float]) -> "AsyncServerStream":
        resp = await self._request(procedure, body, "application/connect+json", headers, timeout)
        if resp.status != 200:
            try:
                data = await resp.read_all()
            finally:
                resp.close()
            raise _error(resp, data)
        return AsyncServerStream(resp)


class AsyncServerStream:
    """The messages of a streaming response, as an async iterator of dicts
    (as :class:`runbox._connect.ServerStream`)."""

    def __init__(self, resp: _Response) -> None:
        self.procedure = resp.procedure
        self.headers = resp.headers
        self.trailers: Dict[str, List[str]] = {}
        self._resp: Optional[_Response] = resp
        self._gzip = resp.headers.get("Connect-Content-Encoding", "identity") == "gzip"
        self._done = False

    def __aiter__(self) -> "AsyncServerStream":
        return self

    async def __anext__(self) -> Dict[str, Any]:
        if self._done or self._resp is None:
            raise StopAsyncIteration
        try:
            prefix = await self._resp.read_exact(_PREFIX.size)
            flags, length = _PREFIX.unpack(prefix)
            if length > MAX_MESSAGE_BYTES:
                raise errors.TooLarge(f"{self.procedure}: a {length}-byte message is over the limit")
            data = await self._resp.read_exact(length)
        except BaseException:
            self.close()
            raise
        if flags & FLAG_COMPRESSED:
            if not self._gzip:
                self.close()
                raise errors.InternalError(f"{self.procedure}: compressed message without an encoding")
            data = gzip.decompress(data)
        if flags & FLAG_END_STREAM:
            self._done = True
            self.close()
            try:
                end = json.loads(data) if data else {}
            except ValueError as e:
                raise errors.InternalError(f"{self.procedure}: end of stream is not JSON: {e}") from e
            self.trailers = end.get("metadata") or {}
            err = end.get("error")
            if err:
                tag = errors.metadata_value(self.trailers, "Runbox-Error")
                raise errors.from_wire(err.get("code", "unknown"), err.get("message", ""), tag, 200)
            raise StopAsyncIteration
        try:
            msg: Dict[str, Any] = json.loads(data)
            return msg
        except ValueError as e:
            self.close()
            raise errors.InternalError(f"{self.procedure}: message is not JSON: {e}") from e

    def close(self) -> None:
        """Drops the connection (the call's effects on the server stay)."""
        resp, self._resp = self._resp, None
        if resp is not None:
            resp.close()


def _error(resp: _Response, data: bytes) -> errors.RunboxError:
    return error_answer(resp.status, resp.reason, resp.headers.get("Runbox-Error", "") or "", data)
