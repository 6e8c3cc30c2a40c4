"""``gravpipe serve DIR``: a read-only HTTP(S) range server for run folders (aiohttp).

- Every request needs ``Authorization: Bearer <token>``; the token is compared in constant
  time (``hmac.compare_digest``). 401 otherwise.
- Only GET and HEAD of a regular file inside DIR: a raw path holding ``..``, a backslash,
  a NUL, or a percent-encoded ``.``, ``/`` or ``\\`` is refused (400) before decoding; a path
  whose resolved target (symlinks followed) leaves DIR is refused (403); names starting
  with ``.`` (temporary files, the token file) and folders are not served (404): the only
  listing is each folder's ``manifest.json``.
- Ranges (``Range: bytes=a-b``, one range a request; 206 with ``Content-Range``) and the
  body itself come from aiohttp's ``FileResponse`` (sendfile where the OS has it).
- At most ``max_connections`` responses are sent at once (a semaphore; others wait);
  request lines and headers are bounded by aiohttp (8190 bytes each), request bodies to 0.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import signal
import ssl
import sys
from pathlib import Path

from aiohttp import web

#: raw-path fragments refused before any decoding: dot segments, encoded dots / slashes /
#: backslashes / NUL, backslashes
_BAD_RAW = re.compile(r"\.\.|%2e|%2f|%5c|%00|\\|\x00", re.IGNORECASE)
STATS = web.AppKey("stats", dict)


def read_token(token_file: str | os.PathLike[str]) -> str:
    """The first line of ``token_file``, stripped; ValueError if it is empty."""
    with open(token_file, encoding="utf-8") as fh:
        token = fh.readline().strip()
    if len(token) < 16:
        raise ValueError(f"{token_file}: the token must be at least 16 characters on the first line")
    return token


def _text(status: int, reason: str, **headers: str) -> web.Response:
    return web.Response(status=status, text=reason + "\n", headers=headers)


class _GatedFile(web.FileResponse):
    """aiohttp's FileResponse, sent while holding one place of the server's semaphore."""

    def __init__(self, path: Path, gate: asyncio.Semaphore, stats: dict, **kwargs):
        super().__init__(path, **kwargs)
        self._gate, self._stats = gate, stats

    async def prepare(self, request: web.BaseRequest):
        async with self._gate:
            writer = await super().prepare(request)
        if request.method == "GET" and self.content_length:
            self._stats["bytes"] += self.content_length
        return writer


def make_app(root: str | os.PathLike[str], token: str, max_connections: int = 64) -> web.Application:
    """The aiohttp application serving ``root`` read-only to holders of ``token``.
    ``app[STATS]`` counts requests and the body bytes of the responses sent."""
    root_path = Path(root).resolve(strict=True)
    if not root_path.is_dir():
        raise NotADirectoryError(f"{root}: not a folder")
    want = token.encode()
    gate = asyncio.Semaphore(max_connections)
    stats = {"requests": 0, "bytes": 0, "refused": 0}

    async def handle(request: web.Request) -> web.StreamResponse:
        stats["requests"] += 1
        auth = request.headers.get("Authorization", "")
        given = auth[7:].strip().encode() if auth[:7].lower() == "bearer " else b""
        if not hmac.compare_digest(given, want):
            stats["refused"] += 1
            return _text(401, "a bearer token is required", **{"WWW-Authenticate": 'Bearer realm="gravpipe"'})
        if request.method not in ("GET", "HEAD"):
            return _text(405, "read-only: GET and HEAD only", Allow="GET, HEAD")
        raw = request.raw_path.split("?", 1)[0]
        if _BAD_RAW.search(raw) or not raw.startswith("/") or "//" in raw:
            stats["refused"] += 1
            return _text(400, "path refused: dot segments and encoded separators are not allowed")
        parts = [p for p in request.path.split("/") if p]
        if not parts or any(p.startswith(".") for p in parts):
            return _text(404, "not found (no listings: fetch manifest.json)")
        target = root_path.joinpath(*parts)
        try:
            resolved = target.resolve(strict=True)
        except (OSError, RuntimeError):
            return _text(404, "not found")
        if not resolved.is_relative_to(root_path):
            stats["refused"] += 1
            return _text(403, "path refused: it leads outside the served folder")
        if not resolved.is_file():
            return _text(404, "not found (no listings: fetch manifest.json)")
        if "," in request.headers.get("Range", ""):
            return _text(416, "one range per request", **{"Content-Range": f"bytes */{resolved.stat().st_size}"})
        return _GatedFile(resolved, gate, stats, chunk_size=1 << 20)

    app = web.Application(client_max_size=0)
    app[STATS] = stats
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


def _ssl_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--tls-cert and --tls-key go together")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


#: seconds a stopping server waits for its open connections
SHUTDOWN_SECONDS = 2.0


async def _serve(app: web.Application, host: str, port: int, ctx: ssl.SSLContext | None, root: str) -> None:
    # a stop (Ctrl-C, SIGINT) waits this long for open connections (a client's keep-alive
    # streams) before it closes them; aiohttp's default of 60 s keeps a stopped server around
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_SECONDS)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ctx, backlog=128)
    await site.start()
    bound = runner.addresses[0][1] if runner.addresses else port
    scheme = "https" if ctx else "http"
    print(f"serving {root} read-only on {scheme}://{host}:{bound}/ (Ctrl-C to stop)", flush=True)
    # SIGINT and SIGTERM stop the server by handlers of the loop's own: a server started in the
    # background by a shell inherits SIGINT ignored, and Python then raises no KeyboardInterrupt
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await runner.cleanup()


def main(root: str, host: str = "127.0.0.1", port: int = 8470, token_file: str = "", tls_cert: str | None = None,
         tls_key: str | None = None, max_connections: int = 64) -> None:
    if not 0 <= port <= 65535:
        raise ValueError(f"--port: {port} is not in 0..65535")
    app = make_app(root, read_token(token_file), max_connections)
    ctx = _ssl_context(tls_cert, tls_key)
    try:
        asyncio.run(_serve(app, host, port, ctx, root))
    finally:
        sys.stdout.flush()
