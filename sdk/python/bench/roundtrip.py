#!/usr/bin/env python3
"""The Python side of the SDK round-trip benchmark (BenchmarkSDKRoundTrip in
internal/server/e2e, which measures the Go client in the same run).

Usage: roundtrip.py URL TOKEN SANDBOX_ID RUNBOX_BIN HOME PROVIDER_ID

Then, on stdin, one line per batch: ``sync N``, ``async N`` or ``local N``.
For each, it runs ``run("true")`` N times on the sandbox (through the
server with the sync or the asyncio client; or straight to the sandbox's
runboxd in local mode, the same sandbox found by its provider id under the
server's home) and answers one line of JSON: ``{"ns": [the N round trips in
nanoseconds], "cpu_ns": this process's CPU time for the batch}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import runbox  # noqa: E402
import runbox.aio  # noqa: E402


def main() -> None:
    url, token, sb_id, runbox_bin, home, provider_id = sys.argv[1:7]
    sb = runbox.Client(url, token).get(sb_id)
    local_sb = runbox.local(runbox_bin, home=home).get(provider_id)

    async def async_batch(n: int) -> List[int]:
        asb = await runbox.aio.AsyncClient(url, token).get(sb_id)
        out = []
        for _ in range(n):
            t = time.perf_counter_ns()
            res = await asb.run("true")
            out.append(time.perf_counter_ns() - t)
            assert res.exit_code == 0, res
        return out

    def sync_batch(s: runbox.Sandbox, n: int) -> List[int]:
        out = []
        for _ in range(n):
            t = time.perf_counter_ns()
            res = s.run("true")
            out.append(time.perf_counter_ns() - t)
            assert res.exit_code == 0, res
        return out

    for line in sys.stdin:
        kind, n = line.split()
        cpu = time.process_time_ns()
        if kind == "sync":
            lat = sync_batch(sb, int(n))
        elif kind == "local":
            lat = sync_batch(local_sb, int(n))
        elif kind == "async":
            lat = asyncio.run(async_batch(int(n)))
        else:
            raise SystemExit(f"unknown batch {kind!r}")
        print(json.dumps({"ns": lat, "cpu_ns": time.process_time_ns() - cpu}), flush=True)


if __name__ == "__main__":
    main()
