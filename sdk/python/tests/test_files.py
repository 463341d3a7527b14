"""Files through the server: single files, and trees as tar streams."""

from __future__ import annotations

import os
import io
import stat
import tarfile
from pathlib import Path

import pytest

import runbox


def test_write_read_round_trip(sb: runbox.Sandbox) -> None:
    data = os.urandom(3 << 20) + b"\x00\xff"  # several messages each way
    info = sb.files.write("dir/sub/blob.bin", data, mode=0o600)
    assert info.size == len(data) and info.mode & 0o777 == 0o600 and info.type == "regular"
    assert sb.files.read("dir/sub/blob.bin") == data
    assert sb.files.read("dir/sub/blob.bin", offset=5, length=10) == data[5:15]
    # What the sandbox's own commands see.
    res = sb.run("sha256sum dir/sub/blob.bin | cut -d' ' -f1; stat -c %a dir/sub/blob.bin", timeout=60)
    import hashlib

    assert res.stdout.split() == [hashlib.sha256(data).hexdigest(), "600"]

    sb.files.write("t.txt", "héllo\n")
    assert sb.files.read_text("t.txt") == "héllo\n"
    with io.BytesIO(b"from a file object") as f:
        sb.files.write("f.txt", f)
    assert sb.files.read("f.txt") == b"from a file object"


def test_stat_list_mkdir_move_remove(sb: runbox.Sandbox) -> None:
    sb.files.mkdir("a/b/c")
    sb.files.write("a/b/c/x", b"1")
    sb.run("ln -s c/x a/b/link", timeout=30)
    assert sb.files.stat("a/b/c").type == "directory"
    link = sb.files.stat("a/b/link")
    assert link.type == "symlink" and link.link_target == "c/x"
    assert sb.files.stat("a/b/link", follow_links=True).type == "regular"
    names = sorted(f.path for f in sb.files.list("a", recursive=True))
    assert names == ["b", "b/c", "b/c/x", "b/link"]
    assert [f.path for f in sb.files.list("a")] == ["b"]
    sb.files.move("a/b/c/x", "a/y")
    assert sb.files.read("a/y") == b"1" and not sb.files.exists("a/b/c/x")
    sb.files.remove("a", recursive=True)
    assert not sb.files.exists("a")


def make_tree(root: Path) -> None:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "src" / "main.py").write_text("print('hi')\n")
    (root / "src" / "pkg" / "data.bin").write_bytes(os.urandom(200_000))
    run = root / "run.sh"
    run.write_text("#!/bin/sh\necho ran\n")
    run.chmod(0o755)
    secret = root / "secret"
    secret.write_text("s")
    secret.chmod(0o600)
    (root / "link").symlink_to("src/main.py")
    (root / "outside").symlink_to("/etc/hostname")
    os.utime(root / "src" / "main.py", ns=(1_600_000_000_123_456_789, 1_600_000_000_123_456_789))


def snapshot(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes(), st.st_mtime_ns // 1000)
    return out


def test_upload_and_download_dir_round_trip(sb: runbox.Sandbox, tmp_path: Path) -> None:
    src, back = tmp_path / "src", tmp_path / "back"
    src.mkdir()
    make_tree(src)
    stats = sb.files.upload_dir(src, "tree")
    assert (stats.files, stats.links, stats.dirs) == (4, 2, 3)
    res = sb.run("cd tree && ./run.sh && readlink link outside && stat -c '%a %n' secret && ls -d empty", timeout=60)
    assert res.stdout == "ran\nsrc/main.py\n/etc/hostname\n600 secret\nempty\n", res.stderr
    names = sb.files.download_dir("tree", back)
    assert "src/pkg/data.bin" in names
    assert snapshot(back) == snapshot(src)
    # upload_dir with delete: removes what the local tree no longer has.
    (src / "new.txt").write_text("new")
    (src / "src" / "pkg" / "data.bin").unlink()
    sb.files.upload_dir(src, "tree", delete=["src/pkg/data.bin"])
    assert not sb.files.exists("tree/src/pkg/data.bin")
    assert sb.files.read("tree/new.txt") == b"new"


def test_download_refuses_writing_through_a_link(sb: runbox.Sandbox, tmp_path: Path) -> None:
    """A tree whose link points out of it comes back as a link, and an
    archive entry under that link is refused before anything is written
    through it."""
    target = tmp_path / "victim"
    target.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        link = tarfile.TarInfo("evil")
        link.type, link.linkname = tarfile.SYMTYPE, str(target)
        tar.addfile(link)
        f = tarfile.TarInfo("evil/owned")
        f.size = 2
        tar.addfile(f, io.BytesIO(b"x\n"))
    buf.seek(0)
    # runboxd itself refuses such an archive (nothing written outside).
    with pytest.raises(runbox.EscapesRoot):
        sb.files.put_archive("bad", buf)
    sb.run(f"mkdir -p bad2 && ln -s {target} bad2/evil && mkdir -p bad2/real && echo x > bad2/real/f", timeout=30)
    out = tmp_path / "out"
    sb.files.download_dir("bad2", out)
    assert os.readlink(out / "evil") == str(target)
    assert (out / "real" / "f").read_bytes() == b"x\n"
    assert os.listdir(target) == []


@pytest.mark.parametrize(
    "entries",
    [
        [("../up", b"x")],
        [("/abs", b"x")],
        [("evil", "->VICTIM"), ("evil/owned", b"x")],
        [("hard", "=>VICTIM/f")],
    ],
)
def test_download_checks_each_entry(sb: runbox.Sandbox, tmp_path: Path, monkeypatch, entries) -> None:
    """The local side of download_dir refuses an archive entry that would
    land outside the directory, whatever the server sent (the archive is
    handed in as if the server had sent it)."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "f").write_text("keep")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, what in entries:
            ti = tarfile.TarInfo(name)
            if isinstance(what, str) and what.startswith("->"):
                ti.type, ti.linkname = tarfile.SYMTYPE, what[2:].replace("VICTIM", str(victim))
                tar.addfile(ti)
            elif isinstance(what, str):
                ti.type, ti.linkname = tarfile.LNKTYPE, what[2:].replace("VICTIM", str(victim))
                tar.addfile(ti)
            else:
                ti.size = len(what)
                tar.addfile(ti, io.BytesIO(what))

    def fake_get_archive(remote_path, out, **kw):
        out.write(buf.getvalue())
        return len(buf.getvalue())

    monkeypatch.setattr(sb.files, "get_archive", fake_get_archive)
    with pytest.raises(runbox.EscapesRoot):
        sb.files.download_dir("x", tmp_path / "dest")
    assert sorted(os.listdir(victim)) == ["f"] and (victim / "f").read_text() == "keep"
    assert not (tmp_path / "up").exists() and not Path("/abs").exists()
