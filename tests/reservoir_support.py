"""Helpers of the reservoir tests: a run folder, a server in a thread or a process."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from aiohttp import web

from gravpipe.cli import main
from gravpipe.reservoir import manifest, serve

TOKEN = secrets.token_hex(16)
SMALL_CHUNK = 16384  # many chunks in a small folder


def make_run(folder: Path, extra_bytes: int = 1 << 20) -> Path:
    """A tiny real run in ``folder`` plus a random file of ``extra_bytes``, its manifest in
    chunks of SMALL_CHUNK."""
    assert main(["run", "-n", "64", "--t-end", "1/4", "--snap-every", "1/8", "--out", str(folder), "--no-progress",
                 "--threads", "1", "--backend", "cpu"]) == 0
    (folder / "extra.bin").write_bytes(os.urandom(extra_bytes))
    m = manifest.new_manifest()
    m.chunk_size = SMALL_CHUNK
    (folder / manifest.MANIFEST_NAME).write_text(m.to_json())
    manifest.record(folder, [p.name for p in folder.iterdir()])
    return folder


def token_file(tmp: Path, token: str = TOKEN) -> Path:
    p = tmp / "token"
    p.write_text(token + "\n")
    return p


class ThreadServer:
    """``serve.make_app`` (or any app) on 127.0.0.1 in a thread of this process."""

    def __init__(self, app: web.Application):
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner = web.AppRunner(app, access_log=None)
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self):
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stats(self) -> dict:
        return self.app[serve.STATS]

    def close(self):
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(root: Path, tok: Path, port: int = 0) -> tuple[subprocess.Popen, int]:
    """``gravpipe serve`` as a process; waits (bounded, 20 s) for its "serving" line."""
    p = subprocess.Popen([sys.executable, "-m", "gravpipe.cli", "serve", str(root), "--port", str(port),
                          "--token-file", str(tok)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 20
    line = ""
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if m := re.search(r"127\.0\.0\.1:(\d+)/", line):
            return p, int(m.group(1))
        if p.poll() is not None:
            break
    p.kill()
    raise RuntimeError(f"gravpipe serve did not start: {line!r}")
