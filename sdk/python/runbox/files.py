"""Files in a sandbox, moved as streams by its runboxd (FilesService).

Single files travel as a stream of messages; whole trees as tar streams
(``upload_dir``, ``download_dir``). With ``root``, a path is resolved beneath
that directory in the sandbox, and neither ``..`` nor a symlink can leave it
(:class:`~runbox.EscapesRoot`).
"""

from __future__ import annotations

import base64
import os
import shutil
import tarfile
import tempfile
from typing import IO, TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Union

from . import errors
from .models import ArchiveStats, FileInfo

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Files"]

# Data per message: 1 MiB (1.33 MiB of base64), well under the 7 MiB limit.
_CHUNK = 1 << 20
# Archives are built and received in memory up to this size, then on disk.
_SPOOL = 8 << 20


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _fs_bytes(path: str) -> str:
    """A relative path as the base64 of its file-system bytes (a ``bytes``
    field of the API)."""
    return _b64(os.fsencode(path))


class Files:
    """The file calls of one sandbox (``sandbox.files``). Paths are in the
    sandbox; relative ones are relative to its runboxd's directory (the
    workspace), or to ``root`` when given."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _call(self, method: str, req: Dict[str, Any]) -> Dict[str, Any]:
        return self._sb._routed("runbox.v1.FilesService/" + method, req)

    def _stream(self, method: str, req: Dict[str, Any]) -> Iterator[Dict[str, Any]]:
        s = self._sb.client._transport.server_stream(
            "runbox.v1.FilesService/" + method, req, headers=self._sb._headers(), timeout=self._sb.client.timeout
        )
        try:
            yield from s
        finally:
            s.close()

    def _upload(self, method: str, header: Dict[str, Any], chunks: Iterator[bytes]) -> Dict[str, Any]:
        def messages() -> Iterator[Dict[str, Any]]:
            yield {"header": header}
            for c in chunks:
                if c:
                    yield {"data": _b64(c)}

        return self._sb.client._transport.client_stream(
            "runbox.v1.FilesService/" + method, messages(), headers=self._sb._headers(), timeout=self._sb.client.timeout
        )

    @staticmethod
    def _req(path: str, root: Optional[str], **fields: Any) -> Dict[str, Any]:
        req: Dict[str, Any] = {"path": path}
        if root:
            req["root"] = root
        req.update({k: v for k, v in fields.items() if v not in (None, False, 0, "")})
        return req

    # -- single files ---------------------------------------------------------

    def read(self, path: str, *, root: Optional[str] = None, offset: int = 0, length: int = 0) -> bytes:
        """Returns a file's bytes, from ``offset`` for ``length`` bytes (0:
        to the end). Raises :class:`~runbox.FileNotFound`,
        :class:`~runbox.IsDirectory`, ..."""
        parts: List[bytes] = []
        req = self._req(path, root, offset=str(offset) if offset else None, length=str(length) if length else None)
        for msg in self._stream("ReadFile", req):
            if msg.get("data"):
                parts.append(base64.b64decode(msg["data"]))
        return b"".join(parts)

    def read_text(self, path: str, *, root: Optional[str] = None, encoding: str = "utf-8") -> str:
        """Returns a file's content as text."""
        return self.read(path, root=root).decode(encoding)

    def write(
        self,
        path: str,
        data: Union[bytes, str, IO[bytes]],
        *,
        root: Optional[str] = None,
        mode: int = 0o644,
        create_parents: bool = True,
        in_place: bool = False,
    ) -> FileInfo:
        """Writes a file from bytes, text (UTF-8) or a binary file object,
        replacing it atomically (readers see the old content or the new,
        never a mix) unless ``in_place``. Missing parent directories are
        created unless ``create_parents`` is False. Returns its info."""
        if isinstance(data, str):
            data = data.encode()
        if isinstance(data, (bytes, bytearray, memoryview)):
            buf = bytes(data)
            chunks: Iterator[bytes] = iter([buf[i : i + _CHUNK] for i in range(0, len(buf), _CHUNK)])
        else:
            chunks = iter(lambda: data.read(_CHUNK), b"")  # type: ignore[union-attr]
        header = self._req(path, root, mode=mode, createParents=create_parents, inPlace=in_place)
        out = self._upload("WriteFile", header, chunks)
        return FileInfo.from_json(out.get("info") or {"path": _fs_bytes(path)})

    def stat(self, path: str, *, root: Optional[str] = None, follow_links: bool = False) -> FileInfo:
        """Describes a path (a final symlink itself, unless ``follow_links``)."""
        out = self._call("Stat", self._req(path, root, followLinks=follow_links))
        return FileInfo.from_json(out.get("info") or {})

    def exists(self, path: str, *, root: Optional[str] = None) -> bool:
        """Whether a path exists (a dangling symlink does)."""
        try:
            self.stat(path, root=root)
            return True
        except errors.FileNotFound:
            return False

    def list(
        self, path: str, *, root: Optional[str] = None, recursive: bool = False, depth: int = 0
    ) -> List[FileInfo]:
        """Lists a directory; ``recursive`` descends (``depth`` levels, 0:
        all). Paths are relative to the directory."""
        out: List[FileInfo] = []
        for msg in self._stream("ListDir", self._req(path, root, recursive=recursive, depth=depth)):
            out.extend(FileInfo.from_json(e) for e in msg.get("entries") or [])
        return out

    def mkdir(self, path: str, *, root: Optional[str] = None, mode: int = 0o755, parents: bool = True) -> None:
        """Creates a directory (with its parents, unless ``parents`` is False)."""
        self._call("MakeDir", self._req(path, root, mode=mode, parents=parents))

    def remove(self, path: str, *, root: Optional[str] = None, recursive: bool = False) -> None:
        """Removes a file, link or empty directory; a whole tree when
        ``recursive``."""
        self._call("Remove", self._req(path, root, recursive=recursive))

    def move(self, src: str, dst: str, *, root: Optional[str] = None) -> None:
        """Renames a path, replacing ``dst`` when it is a file."""
        req: Dict[str, Any] = {"from": src, "to": dst}
        if root:
            req["root"] = root
        self._call("Move", req)

    # -- trees as tar streams -------------------------------------------------

    def put_archive(
        self, remote_dir: str, tar: IO[bytes], *, root: Optional[str] = None, delete: Sequence[str] = ()
    ) -> ArchiveStats:
        """Extracts a tar stream (a binary file object) under a directory of
        the sandbox, created if missing, after removing the paths in
        ``delete`` (relative to it). An entry that would land outside the
        directory fails the whole call (:class:`~runbox.EscapesRoot`)."""
        header = self._req(remote_dir, root)
        if delete:
            header["delete"] = [_fs_bytes(d) for d in delete]
        out = self._upload("PutArchive", header, iter(lambda: tar.read(_CHUNK), b""))
        return ArchiveStats.from_json(out)

    def get_archive(
        self, remote_path: str, out: IO[bytes], *, root: Optional[str] = None, exclude: Sequence[str] = ()
    ) -> int:
        """Writes a sandbox path (a tree) as a tar stream to a binary file
        object, entries named relative to it; ``exclude`` takes
        .gitignore-style patterns. Returns the bytes written."""
        req = self._req(remote_path, root)
        if exclude:
            req["exclude"] = list(exclude)
        n = 0
        for msg in self._stream("GetArchive", req):
            if msg.get("data"):
                b = base64.b64decode(msg["data"])
                out.write(b)
                n += len(b)
        return n

    def upload_dir(
        self,
        local_dir: Union[str, "os.PathLike[str]"],
        remote_dir: str,
        *,
        root: Optional[str] = None,
        delete: Sequence[str] = (),
    ) -> ArchiveStats:
        """Copies the contents of a local directory into a sandbox directory
        as one tar stream. Modes, mtimes, empty directories and symlinks
        (as links, never followed) are kept; ownership is not."""
        local_dir = os.fspath(local_dir)
        if not os.path.isdir(local_dir):
            raise errors.InvalidPath(f"upload_dir: {local_dir!r} is not a directory")
        base: str = local_dir
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for name in sorted(os.listdir(local_dir)):
                    tar.add(os.path.join(local_dir, name), arcname=name, recursive=True,
                            filter=lambda ti: _exact_mtime(ti, base))
            spool.seek(0)
            return self.put_archive(remote_dir, spool, root=root, delete=delete)

    def download_dir(
        self,
        remote_dir: str,
        local_dir: Union[str, "os.PathLike[str]"],
        *,
        root: Optional[str] = None,
        exclude: Sequence[str] = (),
    ) -> List[str]:
        """Copies the contents of a sandbox directory into a local directory
        (created if missing) and returns the entry names written. Symlinks
        come back as links; an entry that would land outside ``local_dir``
        (an absolute name, ``..``, a path through a link, a link or hard
        link pointing out) raises :class:`~runbox.EscapesRoot`, and devices
        and fifos :class:`~runbox.InvalidPath`, before anything is written
        through them."""
        local_dir = os.fspath(local_dir)
        os.makedirs(local_dir, exist_ok=True)
        dest = os.path.realpath(local_dir)
        names: List[str] = []
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            self.get_archive(remote_dir, spool, root=root, exclude=exclude)
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r") as tar:
                dirs = []
                for member in tar:
                    _check_member(member, dest)
                    if member.isdir():
                        dirs.append(member)
                    _extract(tar, member, dest)
                    names.append(member.name)
                # Directory modes and mtimes last, as tarfile.extractall does.
                for member in reversed(dirs):
                    path = os.path.join(dest, member.name)
                    os.chmod(path, member.mode & 0o7777)
                    os.utime(path, ns=(_mtime_ns(member), _mtime_ns(member)))
        return names


def _exact_mtime(info: tarfile.TarInfo, local_dir: str) -> tarfile.TarInfo:
    """Gives an entry its file's mtime to the nanosecond, as a PAX record
    (tarfile would write the float st_mtime, off by a microsecond at
    times)."""
    ns = os.lstat(os.path.join(local_dir, info.name)).st_mtime_ns
    sec, frac = divmod(ns, 10**9)
    info.mtime = sec
    info.pax_headers = dict(info.pax_headers, mtime=f"{sec}.{frac:09d}")
    return info


def _mtime_ns(member: tarfile.TarInfo) -> int:
    """An entry's mtime in nanoseconds, exact from its PAX record when it
    has one (member.mtime is a float, which loses digits)."""
    rec = member.pax_headers.get("mtime")
    if rec:
        sec, _, frac = rec.partition(".")
        if sec.lstrip("-").isdigit() and (frac == "" or frac.isdigit()):
            ns = int(sec) * 10**9
            frac_ns = int((frac + "000000000")[:9])
            return ns - frac_ns if sec.startswith("-") else ns + frac_ns
    return int(member.mtime) * 10**9


def _within(path: str, dest: str) -> bool:
    return path == dest or path.startswith(dest.rstrip(os.sep) + os.sep)


def _check_member(member: tarfile.TarInfo, dest: str) -> None:
    """Refuses an entry that would write outside dest (an absolute name,
    "..", a path through a link already extracted, a hard link to a file
    outside), or that is not a file, directory or link. A symlink may point
    anywhere: it is written as a link and never followed."""
    name = member.name
    if os.path.isabs(name) or ".." in name.split("/"):
        raise errors.EscapesRoot(f"archive entry {name!r} would land outside {dest}")
    target = os.path.realpath(os.path.join(dest, name))
    parent = os.path.realpath(os.path.dirname(os.path.join(dest, name)))
    if not _within(parent, dest) or (not member.issym() and not _within(target, dest)):
        raise errors.EscapesRoot(f"archive entry {name!r} would land outside {dest} (through a link)")
    if member.issym():
        pass  # kept as a link, whatever it points to; nothing is written through it
    elif member.islnk():
        link = os.path.realpath(os.path.join(dest, member.linkname))
        if os.path.isabs(member.linkname) or not _within(link, dest):
            raise errors.EscapesRoot(f"archive entry {name!r} hard-links outside {dest}: {member.linkname!r}")
    elif not (member.isfile() or member.isdir()):
        raise errors.InvalidPath(f"archive entry {name!r}: devices and fifos are not written")


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, dest: str) -> None:
    path = os.path.join(dest, member.name)
    if member.isdir():
        os.makedirs(path, exist_ok=True)
        return
    if os.path.lexists(path) and not os.path.isdir(path):
        os.unlink(path)
    os.makedirs(os.path.dirname(path) or dest, exist_ok=True)
    if member.issym():
        os.symlink(member.linkname, path)
        try:
            os.utime(path, ns=(_mtime_ns(member), _mtime_ns(member)), follow_symlinks=False)
        except (NotImplementedError, OSError):
            pass
        return
    if member.islnk():
        os.link(os.path.join(dest, member.linkname), path)
        return
    src = tar.extractfile(member)
    assert src is not None
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as f, src:
        shutil.copyfileobj(src, f)
    os.chmod(path, member.mode & 0o7777)
    os.utime(path, ns=(_mtime_ns(member), _mtime_ns(member)))
