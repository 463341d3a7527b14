#!/usr/bin/env python3
"""An agent framework's terminal backend on top of the runbox Python SDK.

Agent frameworks run a model's shell commands through a backend class with
one method, ``execute(command, cwd, timeout, stdin_data)``, answering
``{"output": str, "returncode": int}``. This one runs them in a runbox
sandbox through ``runbox serve``:

- a timeout stops the command and everything it started, and the sandbox
  stays usable: returncode 124 (as GNU ``timeout``) and a note in the output;
- stdout and stderr come back merged in the order they were read;
- a sandbox that is gone raises ``runbox.SandboxLost`` -- never "exit 1,
  empty output" -- and, created with ``recreate=True``, the next call gets a
  fresh sandbox under the same id.

Run (needs a server and a token; the SDK is in sdk/python):

    RUNBOX_HOST=http://127.0.0.1:7070 RUNBOX_TOKEN=rbx_... \\
        PYTHONPATH=sdk/python python3 examples/python/terminal_backend.py
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))

import runbox  # noqa: E402


class RunboxEnvironment:
    """A terminal backend whose commands run in one runbox sandbox.

    Args:
        cwd: the default working directory ("" : the sandbox's workspace).
        timeout: the default command timeout, seconds.
        max_output: characters of output kept; the middle of longer output
            is left out, with a note saying how much.
        client: a :class:`runbox.Client` (default: from RUNBOX_HOST and
            RUNBOX_TOKEN).
        create: what :meth:`runbox.Client.create` gets (provider, image,
            memory, ...); ``recreate`` and a 30-minute ``idle_ttl`` are
            the defaults.
    """

    def __init__(
        self,
        cwd: str = "",
        timeout: float = 180,
        max_output: int = 50_000,
        client: Optional[runbox.Client] = None,
        **create: Any,
    ) -> None:
        self.cwd = cwd
        self.timeout = timeout
        self.max_output = max_output
        self.client = client or runbox.Client()
        create.setdefault("recreate", True)
        create.setdefault("idle_ttl", 1800)
        self.sandbox = self.client.create(**create)

    def execute(
        self,
        command: str,
        cwd: str = "",
        *,
        timeout: Optional[float] = None,
        stdin_data: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Runs command in the sandbox and returns {"output", "returncode"}."""
        timeout = timeout or self.timeout
        with self.sandbox.start(
            command,
            cwd=cwd or self.cwd or None,
            timeout=timeout,
            stdin=stdin_data,
        ) as proc:
            parts: List[bytes] = [chunk.data for chunk in proc]  # stdout and stderr, in the order read
        res = proc.result
        assert res is not None
        output = b"".join(parts).decode("utf-8", errors="replace")
        if len(output) > self.max_output:
            half = self.max_output // 2
            left_out = len(output) - 2 * half
            output = f"{output[:half]}\n[... {left_out} characters left out ...]\n{output[-half:]}"
        if res.timed_out:
            return {"output": output + f"\n[Command timed out after {timeout:g}s]", "returncode": 124}
        return {"output": output, "returncode": res.exit_code}

    def cleanup(self) -> None:
        """Removes the sandbox and every process in it."""
        self.sandbox.remove(force=True)


def main() -> None:
    env = RunboxEnvironment(timeout=30)
    try:
        for cmd in ["echo hello; echo oops >&2; exit 3", "sleep 100 & sleep 100", "cat"]:
            kw: Dict[str, Any] = {"timeout": 2} if "sleep" in cmd else {}
            if cmd == "cat":
                kw["stdin_data"] = "from stdin\n"
            print(cmd, "->", env.execute(cmd, **kw))
    finally:
        env.cleanup()


if __name__ == "__main__":
    main()
