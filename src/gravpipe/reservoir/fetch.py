"""``gravpipe fetch URL DEST``: a run folder from any HTTP(S) range server, verified as it arrives.

1. ``URL/manifest.json`` is read first (its request time is the RTT estimate).
2. Every chunk of every file (manifest ``chunk_size``, 4 MiB) is one ``Range`` request;
   K streams (connections) take chunks from one queue. Each stream is a two-stage
   pipeline: while one chunk is hashed and written in a worker thread (SHA-256 and
   ``os.pwrite`` release the GIL), the stream already reads the next one, so it never
   waits for verification; at most two chunks per stream are in memory (one arriving, one
   being stored). HTTP/1.1 still asks for the next chunk only when the last one is in, so
   a stream idles one RTT per chunk. Default K from the first chunk:
   K = 1 + ceil(BDP / chunk) with BDP = (one stream's measured rate) x RTT keeps the link
   busy through those gaps (clamped to 2..16). Pass ``--streams`` on long fat links where
   one stream is window-limited (see BENCHMARKS.md: W / RTT per stream).
3. ``--rate`` paces the total to R bytes/s with one token bucket shared by the streams
   (the receiver reads no faster, so TCP's flow control paces the sender).
4. Each chunk is checked against its SHA-256 once it is in, written into
   ``DEST/.partial/<file>`` at its offset and its index appended to ``<file>.journal``.
   An interrupted fetch resumes from the journal: journaled chunks are re-hashed on disk
   (cheap, local) and only those that fail or are missing are asked for again.
5. A file whose chunks all matched is fsynced and moved to ``DEST/<file>`` with
   ``os.replace``; the manifest goes last. A failed request (connection refused or dropped,
   timeout, 5xx, a short body) is retried up to MAX_TRIES times with exponential backoff;
   401/403/404 and a chunk whose digest differs (the file changed after its manifest entry)
   fail the fetch at once, naming the file; nothing appears under its final name.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gravpipe.io.atomic import atomic_open
from gravpipe.reservoir import manifest as mf

PARTIAL = ".partial"
MAX_TRIES = 6  # per chunk: backoff 0.25 0.5 1 2 4 s between them (~8 s in all)
BACKOFF_S = 0.25
PIECE = 256 << 10  # bytes read (and paced) at a time
TIMEOUT = aiohttp.ClientTimeout(total=600, sock_connect=10, sock_read=30)


class FetchError(ValueError):
    """A fetch that cannot complete: refused, a file that does not match its manifest, a
    server that stays away past the retries. The message names the file."""


class _Retry(Exception):
    pass


class TokenBucket:
    """``rate`` bytes/s shared by all streams, bursts up to ``burst`` bytes."""

    def __init__(self, rate: float, burst: float | None = None):
        self.rate = rate
        self.burst = burst if burst is not None else max(2 * PIECE, rate * 0.05)
        self.tokens = self.burst
        self.last = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        async with self.lock:  # first come, first served: streams share the rate fairly
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            self.tokens -= n
            if self.tokens < 0:
                await asyncio.sleep(-self.tokens / self.rate)


@dataclass
class Stream:
    bytes: int = 0
    seconds: float = 0.0
    requests: int = 0


@dataclass
class _File:
    name: str
    entry: mf.FileEntry
    partial: Path
    journal: Path
    todo: set[int] = field(default_factory=set)
    fd: int = -1
    done: bool = False  # already in place and matching


def _headers(token_file: str | None) -> dict[str, str]:
    if token_file is None:
        return {}
    with open(token_file, encoding="utf-8") as fh:
        token = fh.readline().strip()
    if not token:
        raise ValueError(f"{token_file}: no token on the first line")
    return {"Authorization": f"Bearer {token}"}


def _why(status: int, url: str) -> str:
    return {401: "refused: a valid bearer token is required (--token-file)", 403: "refused by the server (403)",
            404: "not found (404)"}.get(status, f"HTTP {status}") + f": {url}"


class Fetcher:
    def __init__(self, url: str, dest: Path, streams: int | None, rate: float | None, headers: dict[str, str],
                 only: list[str] | None, progress: bool):
        self.base = url.rstrip("/")
        self.dest = dest
        self.want_streams = streams
        self.bucket = TokenBucket(rate) if rate else None
        self.headers = headers
        self.only = only
        self.show = progress
        self.retries = 0
        self.reused = 0
        self.streams: list[Stream] = []
        self.failed: FetchError | None = None

    # ---- one ranged request, retried -------------------------------------------------
    async def _get(self, session: aiohttp.ClientSession, name: str, start: int, end: int, stream: Stream,
                   on_piece=None) -> bytearray:
        url = f"{self.base}/{name}"
        last = "no attempt"
        for attempt in range(MAX_TRIES):
            if attempt:
                self.retries += 1
                await asyncio.sleep(min(BACKOFF_S * 2 ** (attempt - 1), 4.0))
            t0 = time.perf_counter()
            try:
                return await self._get_once(session, url, start, end, stream, on_piece)
            except _Retry as exc:
                last = str(exc)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            finally:
                stream.seconds += time.perf_counter() - t0
        raise FetchError(f"{name}: bytes {start}-{end - 1} failed {MAX_TRIES} times (last: {last})")

    async def _get_once(self, session, url, start, end, stream, on_piece) -> bytearray:
        want = end - start
        hdrs = {**self.headers, "Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        stream.requests += 1
        async with session.get(url, headers=hdrs) as resp:
            if resp.status in (401, 403, 404):
                raise FetchError(_why(resp.status, url))
            if resp.status == 200 and start == 0 and resp.content_length == want:
                pass  # a server that ignores Range for a whole-file chunk
            elif resp.status != 206:
                raise _Retry(f"HTTP {resp.status}")
            elif resp.headers.get("Content-Range", "").split("/")[0] != f"bytes {start}-{end - 1}":
                raise _Retry(f"Content-Range {resp.headers.get('Content-Range')!r}, asked bytes {start}-{end - 1}")
            buf = bytearray(want)  # filled in place: one copy of each byte, none at the end
            view = memoryview(buf)
            got = 0
            while got < want:
                n = min(PIECE, want - got)
                if self.bucket is not None:
                    await self.bucket.take(n)
                piece = await resp.content.read(n)
                if not piece:
                    raise _Retry(f"connection closed after {got} of {want} bytes")
                view[got:got + len(piece)] = piece
                got += len(piece)
                stream.bytes += len(piece)
                if on_piece is not None:
                    on_piece(len(piece))
            view.release()
            return buf

    # ---- the run of a fetch --------------------------------------------------------
    async def run(self) -> dict:
        t_start = time.perf_counter()
        conn = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        async with aiohttp.ClientSession(connector=conn, timeout=TIMEOUT, auto_decompress=False) as session:
            probe = Stream()
            t0 = time.perf_counter()
            text = await self._manifest(session, probe)
            rtt = time.perf_counter() - t0
            m = mf.parse(text, f"{self.base}/{mf.MANIFEST_NAME}")
            files = self._prepare(m)
            total = sum(f.entry.size for f in files)
            todo_bytes = sum(m.chunk_span(f.name, k)[1] - m.chunk_span(f.name, k)[0] for f in files for k in f.todo)
            free = shutil.disk_usage(self.dest).free
            if todo_bytes > free:
                raise OSError(28, f"needs {todo_bytes} bytes, {free} free", str(self.dest))
            queue = [(f, k) for f in files for k in sorted(f.todo)]
            with self._progress(total) as advance:
                advance(total - todo_bytes)
                first_rate = None
                if queue and self.want_streams is None:  # the first chunk, alone: one stream's rate
                    f, k = queue.pop(0)
                    t0 = time.perf_counter()
                    await self._chunk(session, m, f, k, probe, advance)
                    first_rate = (m.chunk_span(f.name, k)[1] - m.chunk_span(f.name, k)[0]) / max(
                        time.perf_counter() - t0, 1e-6)
                k_streams = self.want_streams or self._default_streams(first_rate, rtt, m.chunk_size)
                self.streams = [probe] + [Stream() for _ in range(k_streams - 1)]
                work: asyncio.Queue = asyncio.Queue()
                for item in queue:
                    work.put_nowait(item)
                tasks = [asyncio.create_task(self._worker(session, m, work, s, advance)) for s in self.streams]
                try:
                    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
                    for t in done:
                        if t.exception() is not None:
                            raise t.exception()
                finally:
                    for t in tasks:
                        t.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    for f in files:
                        if f.fd >= 0:
                            os.close(f.fd)
                            f.fd = -1
            for f in files:
                await asyncio.to_thread(self._finish, m, f)
            with atomic_open(self.dest / mf.MANIFEST_NAME, "w") as fh:
                fh.write(text.decode() if isinstance(text, bytes) else text)
            with contextlib.suppress(OSError):
                (self.dest / PARTIAL).rmdir()
        seconds = time.perf_counter() - t_start
        moved = total - self.reused
        return {"url": self.base, "dest": str(self.dest), "files": len(files), "bytes": total,
                "bytes_transferred": sum(s.bytes for s in self.streams), "bytes_reused": self.reused,
                "seconds": seconds, "rate_bytes_per_s": moved / seconds if seconds > 0 else 0.0,
                "streams": len(self.streams), "rtt_estimate_s": rtt, "retries": self.retries,
                "per_stream": [{"bytes": s.bytes, "seconds": s.seconds, "requests": s.requests,
                                "rate_bytes_per_s": s.bytes / s.seconds if s.seconds else 0.0} for s in self.streams]}

    @staticmethod
    def _default_streams(rate: float | None, rtt: float, chunk: int) -> int:
        if rate is None:
            return 2
        return max(2, min(16, 1 + math.ceil(rate * rtt / chunk)))

    async def _manifest(self, session, stream: Stream) -> bytes:
        url = f"{self.base}/{mf.MANIFEST_NAME}"
        for attempt in range(MAX_TRIES):
            if attempt:
                self.retries += 1
                await asyncio.sleep(min(BACKOFF_S * 2 ** (attempt - 1), 4.0))
            try:
                async with session.get(url, headers=self.headers) as resp:
                    if resp.status in (401, 403, 404):
                        raise FetchError(_why(resp.status, url))
                    if resp.status != 200:
                        continue
                    if (resp.content_length or 0) > mf.MAX_MANIFEST_BYTES:
                        raise FetchError(f"{url}: larger than {mf.MAX_MANIFEST_BYTES} bytes")
                    body = bytearray()  # read() returns what has come so far: read to the end, bounded
                    while piece := await resp.content.read(1 << 20):
                        body += piece
                        if len(body) > mf.MAX_MANIFEST_BYTES:
                            raise FetchError(f"{url}: larger than {mf.MAX_MANIFEST_BYTES} bytes")
                    if resp.content_length is not None and len(body) != resp.content_length:
                        continue  # cut short: ask again
                    body = bytes(body)
                    stream.requests += 1
                    return body
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
                continue
        raise FetchError(f"{url}: no answer after {MAX_TRIES} tries")

    def _prepare(self, m: mf.Manifest) -> list[_File]:
        """The files to fetch, each with the chunks still to come (a resumed fetch keeps the
        journaled chunks that still hash right; a file already in place and matching is done)."""
        names = sorted(m.files)
        if self.only:
            keep = [o.strip("/") for o in self.only]
            names = [n for n in names if any(n == o or n.startswith(o + "/") for o in keep)]
            if not names:
                raise FetchError(f"--only {' '.join(self.only)}: no such file in the manifest")
        self.dest.mkdir(parents=True, exist_ok=True)
        files = []
        for name in names:
            e = m.files[name]
            final = self.dest / name
            part = self.dest / PARTIAL / name
            f = _File(name, e, part, part.with_name(part.name + ".journal"))
            if final.is_file() and mf.verify_file(final, name, m) is None:
                self.reused += e.size
                f.done = True
                files.append(f)
                continue
            f.todo = set(range(len(e.chunks)))
            good = self._journaled(m, f)
            f.todo -= good
            self.reused += sum(m.chunk_span(name, k)[1] - m.chunk_span(name, k)[0] for k in good)
            part.parent.mkdir(parents=True, exist_ok=True)
            f.fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(f.fd, e.size)
            with open(f.journal, "w") as jh:  # rewritten: the chunks kept, under this manifest entry
                jh.write(f"{e.sha256}\n" + "".join(f"{k}\n" for k in sorted(good)))
            files.append(f)
        return files

    def _journaled(self, m: mf.Manifest, f: _File) -> set[int]:
        try:
            lines = f.journal.read_text().split()
        except OSError:
            return set()
        if not lines or lines[0] != f.entry.sha256 or not f.partial.is_file():
            return set()  # another version of the file: start afresh
        good = set()
        with open(f.partial, "rb") as fh:
            for k in {int(x) for x in lines[1:] if x.isdigit() and int(x) < len(f.entry.chunks)}:
                a, b = m.chunk_span(f.name, k)
                if hashlib.sha256(os.pread(fh.fileno(), b - a, a)).hexdigest() == f.entry.chunks[k]:
                    good.add(k)
        return good

    async def _worker(self, session, m, work: asyncio.Queue, stream: Stream, advance) -> None:
        """One stream: read chunk k+1 while chunk k is hashed and written in a thread. The
        store of k is awaited before that of k+1 starts, so at most two chunks are held."""
        pending: asyncio.Future | None = None
        try:
            while True:
                try:
                    f, k = work.get_nowait()
                except asyncio.QueueEmpty:
                    break
                data = await self._receive(session, m, f, k, stream, advance)
                if pending is not None:
                    await pending
                pending = asyncio.ensure_future(asyncio.to_thread(self._store, f, k, m.chunk_span(f.name, k)[0],
                                                                  data))
                del data
            if pending is not None:
                await pending
        finally:
            # a store still running writes into f.fd: let its thread end before run() closes
            # the files (a cancelled await would leave it writing into a closed descriptor)
            if pending is not None:
                if not pending.done():
                    await asyncio.wait([pending])
                if not pending.cancelled():
                    pending.exception()  # retrieved: the error that ends the stream is raised instead

    async def _chunk(self, session, m: mf.Manifest, f: _File, k: int, stream: Stream, advance) -> None:
        data = await self._receive(session, m, f, k, stream, advance)
        await asyncio.to_thread(self._store, f, k, m.chunk_span(f.name, k)[0], data)

    async def _receive(self, session, m: mf.Manifest, f: _File, k: int, stream: Stream, advance) -> bytearray:
        a, b = m.chunk_span(f.name, k)
        got = [0]

        def piece(n: int) -> None:
            got[0] += n
            advance(n)

        try:
            data = await self._get(session, f.name, a, b, stream, piece)
        except BaseException:
            advance(-got[0])
            raise
        if got[0] != b - a:  # retried: the progress counted the lost pieces too
            advance(b - a - got[0])
        return data

    @staticmethod
    def _store(f: _File, k: int, offset: int, data: bytearray) -> None:
        if hashlib.sha256(data).hexdigest() != f.entry.chunks[k]:
            raise FetchError(f"{f.name}: chunk {k} (bytes {offset}-{offset + len(data) - 1}) does not match the "
                             "manifest: the file changed at the source after its manifest entry; nothing written "
                             "under its final name")
        view, done = memoryview(data), 0
        while done < len(data):  # pwrite may write less than asked
            done += os.pwrite(f.fd, view[done:], offset + done)
        view.release()
        with open(f.journal, "a") as jh:
            jh.write(f"{k}\n")

    def _finish(self, m: mf.Manifest, f: _File) -> None:
        final = self.dest / f.name
        if f.done:
            return
        # every chunk's SHA-256 matched as it came in (or, resumed, on disk): size is what is left
        if (size := f.partial.stat().st_size) != f.entry.size:
            raise FetchError(f"{f.name}: {size} bytes in {PARTIAL}, the manifest says {f.entry.size}")
        with open(f.partial, "rb") as fh:
            os.fsync(fh.fileno())
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(f.partial, final)
        f.journal.unlink(missing_ok=True)
        dfd = os.open(final.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        with contextlib.suppress(OSError):
            f.partial.parent.rmdir() if f.partial.parent != self.dest / PARTIAL else None

    @contextlib.contextmanager
    def _progress(self, total: int):
        if not self.show:
            yield lambda n: None
            return
        from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                   TransferSpeedColumn)

        with Progress(TextColumn("fetch"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      TimeRemainingColumn(), transient=True) as bar:
            task = bar.add_task("fetch", total=total)
            yield lambda n: bar.advance(task, n)


def fetch(url: str, dest: str | os.PathLike[str], streams: int | None = None, rate: float | None = None,
          token_file: str | None = None, only: list[str] | None = None, progress: bool = False) -> dict:
    """Fetch the run folder at ``url`` into ``dest`` (see the module docstring); returns the
    report (bytes, seconds, rate per stream, retries). Raises FetchError (a ValueError) or
    OSError (a full disk: ENOSPC, checked before the first byte and on every write)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{url}: expected an http:// or https:// URL")
    if streams is not None and not 1 <= streams <= 64:
        raise ValueError(f"--streams: {streams} is not in 1..64")
    f = Fetcher(url, Path(dest), streams, rate, _headers(token_file), only, progress)
    return asyncio.run(f.run())
