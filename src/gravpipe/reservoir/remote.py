"""A remote snapshot read in place: ranged reads (fsspec's HTTP file system) under h5py, each
manifest chunk touched fetched whole and checked against its SHA-256 before h5py sees a byte.

    from gravpipe.reservoir import remote
    print(remote.describe("http://host:8470/run/snapshot_0004.h5", token_file="token"))
    with remote.open_h5("http://host:8470/run/snapshot_0004.h5") as f:   # h5py.File
        pos = f["PartType1/Coordinates"][:1000]                           # ~1-2 chunks read

``gravpipe.io.read(url)`` / ``io.describe(url)`` / ``gravpipe info URL`` come here. The
manifest is ``<folder of the file>/manifest.json``; a file it does not list is refused. The
token comes from ``token_file`` or the file named by $GRAVPIPE_TOKEN_FILE. Reads cost whole
chunks (4 MiB): a header read is one request; at most CACHE_CHUNKS chunks are kept. Single
files only (not multi-file sets).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections import OrderedDict

from gravpipe.reservoir import manifest as mf

CACHE_CHUNKS = 16


def is_url(path: object) -> bool:
    return isinstance(path, str) and path.startswith(("http://", "https://"))


class VerifiedRemoteFile(io.RawIOBase):
    """A read-only, seekable file over HTTP range requests; every chunk read is verified."""

    def __init__(self, url: str, token_file: str | None = None):
        import fsspec

        token_file = token_file or os.environ.get("GRAVPIPE_TOKEN_FILE")
        headers = {}
        if token_file:
            with open(token_file, encoding="utf-8") as fh:
                headers["Authorization"] = f"Bearer {fh.readline().strip()}"
        self.url = url
        self.base, self.name = url.rsplit("/", 1)
        self.fs = fsspec.filesystem("http", client_kwargs={"headers": headers}, skip_instance_cache=True)
        try:
            text = self.fs.cat_file(f"{self.base}/{mf.MANIFEST_NAME}")
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.base}/{mf.MANIFEST_NAME}: not found (no manifest beside {self.name})") \
                from None
        except Exception as exc:  # fsspec raises aiohttp's errors for 401/403 and refusals
            raise OSError(f"{self.base}/{mf.MANIFEST_NAME}: {exc}") from None
        self.m = mf.parse(text, f"{self.base}/{mf.MANIFEST_NAME}")
        if self.name not in self.m.files:
            raise ValueError(f"{url}: not in its folder's manifest")
        self.entry = self.m.files[self.name]
        self.pos = 0
        self.cache: OrderedDict[int, bytes] = OrderedDict()
        self.chunks_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.entry.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _chunk(self, k: int) -> bytes:
        if k in self.cache:
            self.cache.move_to_end(k)
            return self.cache[k]
        a, b = self.m.chunk_span(self.name, k)
        data = self.fs.cat_file(self.url, start=a, end=b)
        if len(data) != b - a or hashlib.sha256(data).hexdigest() != self.entry.chunks[k]:
            raise ValueError(f"{self.url}: chunk {k} (bytes {a}-{b - 1}) does not match the manifest")
        self.chunks_read += 1
        self.cache[k] = data
        if len(self.cache) > CACHE_CHUNKS:
            self.cache.popitem(last=False)
        return data

    def readinto(self, buf) -> int:
        view = memoryview(buf).cast("B")
        n = 0
        while n < len(view) and self.pos < self.entry.size:
            k, off = divmod(self.pos, self.m.chunk_size)
            data = self._chunk(k)
            take = min(len(view) - n, len(data) - off)
            view[n:n + take] = data[off:off + take]
            n += take
            self.pos += take
        return n


@contextlib.contextmanager
def open_h5(url: str, token_file: str | None = None):
    """The remote file as a read-only ``h5py.File`` (slices read only the chunks they touch)."""
    import h5py

    raw = VerifiedRemoteFile(url, token_file)
    try:
        with h5py.File(raw, "r") as f:
            yield f
    finally:
        raw.close()


def read_snapshot(url: str, part_type: int = 1, token_file: str | None = None):
    """``io.read_snapshot`` of a remote single-file snapshot (all its chunks are verified)."""
    from gravpipe.io.snapshot import _checked_part_type, _describe_lines, _read_open_file

    with open_h5(url, token_file) as f:
        return _read_open_file(f, url, _checked_part_type(part_type))


def describe(url: str, token_file: str | None = None) -> str:
    """``io.describe`` of a remote snapshot: reads (and verifies) only the chunks holding its
    header and metadata."""
    from gravpipe.io.snapshot import _checked_part_type, _describe_lines, _read_open_file

    with open_h5(url, token_file) as f:
        return "\n".join(_describe_lines(f, url))
