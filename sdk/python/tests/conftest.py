"""Fixtures: a real `runbox serve` process for the test session.

The runbox binaries come from $RUNBOX_BIN_DIR (the Go test that runs this
suite builds them there); without it they are built from the repository
with `go build`. The server gets its own short RUNBOX_HOME under /tmp, a
SQLite database there, a token made with `runbox token create`, and the
host provider, on 127.0.0.1 and a free port.
"""

from __future__ import annotations

import atexit
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional

import pytest

SDK_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(SDK_DIR))
# RUNBOX_SDK_INSTALLED=1 tests the runbox package pip installed (CI does,
# with sdk/python/README.md's commands, from a directory outside this tree),
# never the source beside these tests.
INSTALLED = os.environ.get("RUNBOX_SDK_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, SDK_DIR)

import runbox  # noqa: E402

# PKG_DIR is the sys.path entry runbox is imported from: SDK_DIR, or the
# site-packages it was installed into.
PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(runbox.__file__)))
if INSTALLED and PKG_DIR == SDK_DIR:
    raise RuntimeError(f"RUNBOX_SDK_INSTALLED=1 but runbox is imported from the source tree ({runbox.__file__}): run pytest from another directory")

# Generous: the test machine is shared and may be very busy.
WAIT = 60.0


def wait_for(what: str, cond: Callable[[], bool], timeout: float = WAIT) -> None:
    """Polls cond until it holds; fails after a generous deadline."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


_bin_dir: Optional[str] = None


def bin_dir() -> str:
    """The directory holding the runbox and runboxd binaries."""
    global _bin_dir
    if _bin_dir:
        return _bin_dir
    d = os.environ.get("RUNBOX_BIN_DIR")
    if d:
        _bin_dir = d
        return d
    go = shutil.which("go") or "/usr/local/go/bin/go"
    d = tempfile.mkdtemp(prefix="rbpybin")
    atexit.register(shutil.rmtree, d, True)
    env = dict(os.environ, CGO_ENABLED="0")
    subprocess.run([go, "build", "-o", d + "/", "./cmd/runbox", "./cmd/runbox-full", "./cmd/runbox-server", "./cmd/runboxd"], cwd=REPO, env=env, check=True)
    _bin_dir = d
    return d


class Server:
    """A runbox serve process with its home, database and log."""

    def __init__(self, extra: Optional[List[str]] = None, providers: str = "host") -> None:
        self.providers = providers
        self.home = tempfile.mkdtemp(prefix="rbpy", dir="/tmp")
        self.db = os.path.join(self.home, "runbox.db")
        self.extra = extra or []
        self.addr = "127.0.0.1:0"
        self.url = ""
        self.proc: Optional[subprocess.Popen] = None
        self.log: List[str] = []
        self._tokens: Dict[str, str] = {}

    def env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(
            RUNBOX_HOME=self.home,
            RUNBOX_RUNBOXD=os.path.join(bin_dir(), "runboxd"),
            DOCKER_HOST=f"unix://{self.home}/no-docker.sock",
            RUNBOX_HOST="",
            RUNBOX_TOKEN="",
            RUNBOX_PROVIDER="",
        )
        return env

    def runbox(self, *args: str) -> str:
        """Runs the runbox binary with the server's environment."""
        out = subprocess.run(
            [os.path.join(bin_dir(), "runbox"), *args], env=self.env(), capture_output=True, text=True
        )
        if out.returncode != 0:
            raise AssertionError(f"runbox {args}: exit {out.returncode}: {out.stderr}")
        return out.stdout

    def token(self, tenant: str = "py", *quota: str) -> str:
        """A token for tenant (made once per tenant and quota)."""
        key = " ".join((tenant,) + quota)
        if key not in self._tokens:
            self._tokens[key] = self.runbox("token", "create", "--tenant", tenant, "--db", self.db, *quota).strip()
        return self._tokens[key]

    def client(self, tenant: str = "py", **kw: object) -> runbox.Client:
        return runbox.Client(self.url, self.token(tenant), **kw)  # type: ignore[arg-type]

    def start(self) -> None:
        """Starts the server (again on the same address after the first
        time) and waits for its "serving" log line."""
        args = [
            os.path.join(bin_dir(), "runbox"), "serve", "--providers", self.providers, "--allow-host-provider", "--listen", self.addr,
            "--db", self.db, "--reap-interval", "200ms", *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            args, env=self.env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        ready: "list[str]" = []
        got = threading.Event()

        def read(proc: subprocess.Popen) -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                self.log.append(line)
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("msg") == "serving" and not got.is_set():
                    ready.append(m["addr"])
                    got.set()
            got.set()

        threading.Thread(target=read, args=(self.proc,), daemon=True).start()
        if not got.wait(WAIT) or not ready:
            self.stop(signal.SIGKILL)
            raise AssertionError("runbox serve did not start:\n" + "".join(self.log))
        self.addr = ready[0]
        self.url = "http://" + self.addr

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def close(self) -> None:
        """Removes every sandbox, stops the server, removes its files."""
        if self.proc is not None:
            for token in self._tokens.values():
                try:
                    c = runbox.Client(self.url, token, timeout=WAIT)
                    for sb in c.list():
                        sb.remove(force=True)
                except runbox.RunboxError:
                    pass
        self.stop()
        # Whatever is left (a sandbox whose runboxd a test killed).
        for pid in runboxd_pids(self.home):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.home + "-workspaces", ignore_errors=True)


def runboxd_pids(home: str) -> List[int]:
    """The runboxd pids of the host sandboxes recorded under home."""
    pids = []
    d = os.path.join(home, "sandboxes")
    for name in os.listdir(d) if os.path.isdir(d) else []:
        try:
            with open(os.path.join(d, name, "sandbox.json")) as f:
                pids.append(int(json.load(f)["pid"]))
        except (OSError, ValueError, KeyError):
            pass
    return [p for p in pids if p > 0]


def runboxd_pid(server: Server, sb: runbox.Sandbox) -> int:
    """The pid of sb's runboxd (host provider: a process on this machine)."""
    with open(os.path.join(server.home, "sandboxes", sb.refresh().provider_id, "sandbox.json")) as f:
        pid = int(json.load(f)["pid"])
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        assert b"runboxd" in f.read(), f"pid {pid} is not a runboxd"
    return pid


class Marker(str):
    """A unique sleep duration, so a test can find its own processes.

    ``sh`` is a shell prelude that sets $M to it without writing it out, so
    that only the sleeps (``sleep $M``) carry it in their command lines, not
    the shells that start them."""

    sh: str


def marker() -> Marker:
    a, b = random.randint(3000, 8999), random.randint(100000, 999999)
    m = Marker(f"{a}.{b}")
    m.sh = f"M={a}.; export M=${{M}}{b}; "
    return m


def count_procs(mark: str) -> int:
    """Counts live (not zombie) processes whose command line has mark."""
    n = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if mark.encode() in cmd and state != b"Z" and str(os.getpid()) != pid:
            n += 1
    return n


def kill_procs(mark: str) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mark.encode() in f.read():
                    os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server()
    s.start()
    yield s
    if s.proc is not None and s.proc.poll() is not None:
        sys.stderr.write("runbox serve exited early:\n" + "".join(s.log))
    s.close()


@pytest.fixture
def fresh_server() -> Iterator[Server]:
    """A server of the test's own, for tests that stop or restart it."""
    s = Server()
    s.start()
    yield s
    s.close()


@pytest.fixture(scope="session")
def client(server: Server) -> runbox.Client:
    return server.client()


@pytest.fixture
def sb(client: runbox.Client) -> Iterator[runbox.Sandbox]:
    with client.create(provider="host", labels={"test": "py"}) as s:
        yield s


class Proxy:
    """A TCP forwarder to a server that a test can cut: drop() closes every
    connection it carries; pause() refuses new ones until resume()."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.url = "http://127.0.0.1:%d" % self.listener.getsockname()[1]
        self.conns: List[socket.socket] = []
        self.lock = threading.Lock()
        self.paused = False
        self.accepted = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            if self.paused:
                c.close()
                continue
            try:
                u = socket.create_connection(self.target)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.accepted += 1
                self.conns += [c, u]
            threading.Thread(target=self._pipe, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c), daemon=True).start()

    @staticmethod
    def _pipe(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def drop(self) -> None:
        """Breaks every connection now (both sides see a reset or EOF)."""
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        self.drop()


@pytest.fixture
def proxy(server: Server) -> Iterator[Proxy]:
    p = Proxy(server.addr)
    yield p
    p.close()
