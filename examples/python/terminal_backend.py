#!/usr/bin/env python3
"""An agent framework's terminal backend on top of the runbox Python SDK.

Frameworks drive a command through a ``subprocess.Popen``-like handle: they
read its merged output, poll it, and kill it on an interrupt. ``runbox.Popen``
is one, so the backend is only the framework's own loop:

- a timeout stops the command and everything it started, and the sandbox
  stays usable: returncode 124 (as GNU ``timeout``) and a note in the output;
- an interrupt (``interrupt()`` from another thread) kills the command's
  whole tree at once: returncode 130;
- stdout and stderr come back merged in the order they were read, and a
  background child holding the output open does not hang the call;
- exported variables and ``cd`` persist across commands (a runbox session);
- a lost sandbox raises ``runbox.SandboxLost``, and the next command gets a
  fresh one (``recreate=True``; ``proc.result.recreated`` says so).

Run (needs a server and a token; the SDK is in sdk/python):

    RUNBOX_HOST=http://127.0.0.1:7070 RUNBOX_TOKEN=rbx_... \\
        PYTHONPATH=sdk/python python3 examples/python/terminal_backend.py
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, Dict, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))

import runbox  # noqa: E402


class RunboxEnvironment:
    """A terminal backend whose commands run in one runbox sandbox, in one
    shell session. ``create`` is what :meth:`runbox.Client.create` gets."""

    def __init__(self, cwd: str = "", timeout: float = 180, max_output: int = 50_000,
                 client: Optional[runbox.Client] = None, **create: Any) -> None:
        self.cwd, self.timeout, self.max_output = cwd, timeout, max_output
        self.interrupted = threading.Event()
        create.setdefault("recreate", True)
        create.setdefault("idle_ttl", 1800)
        self.sandbox = (client or runbox.Client()).create(**create)

    def interrupt(self) -> None:
        """Stops the running command (called from another thread)."""
        self.interrupted.set()

    def execute(self, command: str, cwd: str = "", *, timeout: Optional[float] = None,
                stdin_data: Optional[str] = None) -> Dict[str, Any]:
        """Runs command and returns {"output", "returncode"}."""
        timeout = timeout or self.timeout
        self.interrupted.clear()
        proc = self.sandbox.popen(command, cwd=cwd or self.cwd or None, timeout=timeout, stdin=stdin_data,
                                  session="agent", stderr=runbox.STDOUT, text=True)
        threading.Thread(target=self._watch, args=(proc,), daemon=True).start()
        with proc:
            output = proc.stdout.read()
        if len(output) > self.max_output:
            half = self.max_output // 2
            output = f"{output[:half]}\n[... {len(output) - 2 * half} characters left out ...]\n{output[-half:]}"
        if proc.result.timed_out:
            return {"output": output + f"\n[Command timed out after {timeout:g}s]", "returncode": 124}
        if self.interrupted.is_set():
            return {"output": output + "\n[Command interrupted]", "returncode": 130}
        return {"output": output, "returncode": proc.returncode}

    def _watch(self, proc: runbox.Popen) -> None:
        while proc.poll() is None:
            if self.interrupted.wait(0.1):
                proc.kill()
                return

    def cleanup(self) -> None:
        """Removes the sandbox and every process in it."""
        self.sandbox.remove(force=True)


def main() -> None:
    env = RunboxEnvironment(timeout=30)
    try:
        for cmd in ["echo hello; echo oops >&2; exit 3", "sleep 100 & sleep 100", "cat", "export X=1", "echo $X"]:
            kw: Dict[str, Any] = {"timeout": 2} if "sleep" in cmd else {}
            if cmd == "cat":
                kw["stdin_data"] = "from stdin\n"
            print(cmd, "->", env.execute(cmd, **kw))
    finally:
        env.cleanup()


if __name__ == "__main__":
    main()
