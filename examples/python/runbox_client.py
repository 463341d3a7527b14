#!/usr/bin/env python3
"""A runbox serve client in Python's standard library alone.

Every call is one JSON POST (Connect's HTTP/JSON protocol) to
$RUNBOX_HOST/runbox.v1.SandboxService/<Method> with the header
"Authorization: Bearer $RUNBOX_TOKEN". Errors come back as HTTP 4xx/5xx with
a JSON body {"code": "...", "message": "..."}. Bytes fields (stdout,
stderr) are base64; 64-bit integers are strings.

Run:  RUNBOX_HOST=http://127.0.0.1:7070 RUNBOX_TOKEN=... python3 runbox_client.py
"""

import base64
import json
import os
import sys
import urllib.error
import urllib.request


class RunboxError(Exception):
    """An error the server answered: code is Connect's ("not_found", ...)."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Runbox:
    def __init__(self, host, token, timeout=300):
        self.host = host.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, body):
        req = urllib.request.Request(
            f"{self.host}/runbox.v1.SandboxService/{method}",
            data=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {self.token}",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            err = json.load(e)
            raise RunboxError(err.get("code", "unknown"), err.get("message", "")) from None

    def create(self, **spec):
        return self.call("Create", {"spec": spec})["sandbox"]

    def run(self, sandbox_id, command, timeout_ms=0):
        """Runs command to its end; returns (exit_code, stdout, stderr, result)."""
        spec = {"command": command}
        if timeout_ms:
            spec["timeoutMs"] = timeout_ms
        res = self.call("Run", {"sandboxId": sandbox_id, "spec": spec})["result"]
        out = base64.b64decode(res.get("stdout", ""))
        err = base64.b64decode(res.get("stderr", ""))
        return res.get("exitCode", 0), out, err, res

    def delete(self, sandbox_id):
        self.call("Delete", {"id": sandbox_id})


def main():
    rb = Runbox(os.environ["RUNBOX_HOST"], os.environ["RUNBOX_TOKEN"])
    sb = rb.create(labels={"client": "python"}, idleTtlMs=600000)
    print("sandbox", sb["id"])
    try:
        code, out, err, _ = rb.run(sb["id"], "echo hello from python; echo oops >&2; exit 3")
        print("exit", code)
        print("stdout", out.decode().strip())
        print("stderr", err.decode().strip())
        code, _, _, res = rb.run(sb["id"], "sleep 30", timeout_ms=300)
        print("timed_out", res.get("timedOut", False), "exit", code)
        try:
            rb.run("sb-000000000000", "true")
        except RunboxError as e:
            print("error", e.code)
    finally:
        rb.delete(sb["id"])
    print("deleted")


if __name__ == "__main__":
    sys.exit(main())
