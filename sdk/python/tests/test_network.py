"""Egress policy and exposed ports through the Python SDK against a real
runbox serve: a dev server in a sandbox reached through the server's port
route with the token and with the signed URL, refused without them and
once unexposed; egress rules reach the server and are checked there."""

from __future__ import annotations

import random
import time
import urllib.error
import urllib.request
from typing import Dict, Optional, Tuple

import pytest
from conftest import WAIT, Server, wait_for

import runbox


def fetch(url: str, headers: Optional[Dict[str, str]] = None) -> Tuple[int, str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_expose_port(server: Server, client: runbox.Client, sb: runbox.Sandbox) -> None:
    port = random.randint(20000, 29999)
    mark = f"hello-{random.randint(0, 10**9)}"
    res = sb.run(
        f"mkdir -p site && echo {mark} > site/hello.txt && "
        f"(cd site && nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 &)",
        timeout=30,
    )
    assert res.exit_code == 0, res
    try:
        exp = sb.expose(port, ttl=600)
        assert exp.url.endswith(f"/sandboxes/{sb.id}/ports/{port}/")
        assert exp.signed_url.startswith(exp.url + "?")
        assert time.time() < exp.expires_at <= time.time() + 601
        auth = {"Authorization": "Bearer " + server.token("py")}
        wait_for("the dev server through the route", lambda: fetch(exp.url + "hello.txt", auth)[0] == 200)
        assert fetch(exp.url + "hello.txt", auth) == (200, mark + "\n")
        base, _, query = exp.signed_url.partition("?")
        assert fetch(base + "hello.txt?" + query) == (200, mark + "\n")
        code, body = fetch(exp.url + "hello.txt")
        assert code == 401 and "Authorization: Bearer" in body
        code, body = fetch(exp.url + "hello.txt", {"Authorization": "Bearer " + server.token("someone-else")})
        assert code == 404
        assert port in sb.refresh().exposed_ports
        sb.unexpose(port)
        code, body = fetch(exp.url + "hello.txt", auth)
        assert code == 403 and "not exposed" in body
        code, body = fetch(base + "hello.txt?" + query)
        assert code == 403 and "not exposed" in body
        assert port not in sb.refresh().exposed_ports
    finally:
        sb.run(f"pkill -f 'http.server {port}' || true", timeout=30)


def test_expose_bad_port(sb: runbox.Sandbox) -> None:
    with pytest.raises(runbox.InvalidArgument, match="1 to 65535"):
        sb.expose(70000)


def test_egress_rules_reach_the_server(client: runbox.Client, sb: runbox.Sandbox) -> None:
    # The rules travel in the spec: the server refuses them without the
    # private network, naming it.
    with pytest.raises(runbox.InvalidArgument, match="network private"):
        client.create(provider="host", allow=["pypi.org"], deny=["evil.example"])
    with pytest.raises(runbox.InvalidArgument, match="network private"):
        sb.set_egress(allow=["pypi.org"])
    with pytest.raises(TypeError, match="list of strings"):
        client.create(provider="host", network="private", allow="pypi.org")  # type: ignore[arg-type]


def test_set_egress_local_server() -> None:
    """As root, against serve with the local provider: a private sandbox
    fetches nothing until set_egress allows a name (pinned to a server on
    this machine's loopback, within the operator's --allow-egress-cidr);
    then the next fetch works, and after set_egress with no rule it is
    refused again. The same through runbox.aio, whose expose returns the
    route's URL."""
    import asyncio
    import http.server
    import os
    import secrets
    import threading

    import runbox.aio

    if os.geteuid() != 0:
        pytest.skip("serve's local provider makes namespaces and a network of its own: run as root (CI does)")
    mark = secrets.token_hex(8)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = mark.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    port = httpd.server_address[1]
    name = f"pkg-{mark}.test"
    fetch_cmd = (
        "python3 -c 'import sys, urllib.request; "
        f'print(urllib.request.urlopen("http://{name}:{port}/", timeout=20).read().decode())\''
    )
    s = Server(extra=["--allow-egress-cidr", "127.0.0.1/32"], providers="local")
    s.start()
    try:
        c = s.client()
        with c.create(provider="local", network="private") as sb:
            before = sb.run(fetch_cmd)
            assert before.exit_code != 0 and mark not in before.stdout, before
            info = sb.set_egress(allow=[name], allow_cidr=["127.0.0.1/32"], resolve={name: "127.0.0.1"})
            assert info.id == sb.id
            after = sb.run(fetch_cmd)
            assert after.exit_code == 0 and after.stdout == mark + "\n", after
            sb.set_egress()
            again = sb.run(fetch_cmd)
            assert again.exit_code != 0 and mark not in again.stdout, again

        async def main() -> None:
            async with runbox.aio.AsyncClient(s.url, s.token()) as ac:
                async with await ac.create(provider="local", network="private") as asb:
                    assert (await asb.run(fetch_cmd)).exit_code != 0
                    await asb.set_egress(allow=[name], allow_cidr=["127.0.0.1/32"], resolve={name: "127.0.0.1"})
                    res = await asb.run(fetch_cmd)
                    assert res.exit_code == 0 and res.stdout == mark + "\n", res
                    exp = await asb.expose(8000, ttl=60)
                    assert exp.url.endswith(f"/sandboxes/{asb.id}/ports/8000/") and exp.signed_url
                    await asb.unexpose(8000)

        asyncio.run(main())
    finally:
        s.close()
        httpd.shutdown()
