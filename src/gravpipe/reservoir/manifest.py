"""``manifest.json``: what a run folder holds, so that a copy of it can be checked chunk by chunk.

Layout (JSON)::

    {"format": "gravpipe-manifest", "version": 1,
     "run": {"id": "<uuid4 hex>", "created": "<UTC ISO time>", "gravpipe": "<version>"},
     "algorithm": "sha256", "chunk_size": 4194304,
     "files": {"snapshot_0001.h5": {"size": 123, "sha256": "<hex>", "chunks": ["<hex>", ...]}, ...}}

Names are POSIX paths relative to the folder (a multi-file set's members are listed one by
one: ``snapshot_0003/snapshot_0003.0.h5``). ``chunks[k]`` is the SHA-256 of bytes
``[k * chunk_size, min((k + 1) * chunk_size, size))``; an empty file has no chunks. SHA-256
because it is the fastest of hashlib's strong hashes here (SHA-NI: ~680 MB/s on one core of
the 2-core Xeon, blake2b ~345 MB/s). The manifest is rewritten atomically (a temporary name,
then ``os.replace``) each time a file is recorded.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable

from gravpipe.io.atomic import atomic_open

MANIFEST_NAME = "manifest.json"
FORMAT = "gravpipe-manifest"
VERSION = 1
CHUNK_SIZE = 4 << 20
ALGORITHM = "sha256"
#: largest manifest accepted (a 100 TB folder in 4 MiB chunks is ~2 GB of hex; 256 MiB is
#: ~4 TB of data): a bound on what a remote server can make us parse
MAX_MANIFEST_BYTES = 256 << 20


class ManifestError(ValueError):
    """A manifest that is missing, malformed, or that a folder does not match."""


@dataclass
class FileEntry:
    size: int
    sha256: str
    chunks: list[str]


@dataclass
class Manifest:
    run: dict
    chunk_size: int = CHUNK_SIZE
    files: dict[str, FileEntry] = field(default_factory=dict)

    def chunk_span(self, name: str, k: int) -> tuple[int, int]:
        """Byte range ``[start, end)`` of chunk ``k`` of file ``name``."""
        start = k * self.chunk_size
        return start, min(start + self.chunk_size, self.files[name].size)

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.files.values())

    def to_json(self) -> str:
        files = {n: {"size": e.size, "sha256": e.sha256, "chunks": e.chunks} for n, e in sorted(self.files.items())}
        doc = {"format": FORMAT, "version": VERSION, "run": self.run, "algorithm": ALGORITHM,
               "chunk_size": self.chunk_size, "files": files}
        return json.dumps(doc, indent=1) + "\n"


def new_manifest() -> Manifest:
    from gravpipe import __version__

    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return Manifest(run={"id": uuid.uuid4().hex, "created": now, "gravpipe": __version__})


def check_name(name: object) -> str:
    """``name`` if it is a safe relative POSIX path (no '..', not absolute, no empty or '.'
    parts, no backslash or NUL), else ManifestError."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        raise ManifestError(f"manifest: bad file name {name!r}")
    parts = name.split("/")
    if name.startswith("/") or any(p in ("", ".", "..") for p in parts) or name == MANIFEST_NAME:
        raise ManifestError(f"manifest: file name {name!r} is not a plain path inside the folder")
    return name


def parse(text: bytes | str, where: str = MANIFEST_NAME) -> Manifest:
    """A Manifest from its JSON text; ManifestError naming ``where`` and the fault."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{where}: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        doc = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ManifestError(f"{where}: not a gravpipe manifest (no \"format\": \"{FORMAT}\")")
    if doc.get("version") != VERSION or doc.get("algorithm") != ALGORITHM:
        raise ManifestError(f"{where}: version {doc.get('version')!r} / algorithm {doc.get('algorithm')!r} "
                            f"not supported (expected {VERSION} / {ALGORITHM})")
    chunk = doc.get("chunk_size")
    if not isinstance(chunk, int) or isinstance(chunk, bool) or not (1 << 12) <= chunk <= (1 << 30):
        raise ManifestError(f"{where}: chunk_size {chunk!r} is not an integer in [4096, 2^30]")
    files = doc.get("files")
    run = doc.get("run")
    if not isinstance(files, dict) or not isinstance(run, dict):
        raise ManifestError(f"{where}: \"files\" and \"run\" must be objects")
    m = Manifest(run=run, chunk_size=chunk)
    for name, e in files.items():
        check_name(name)
        try:
            size, digest, chunks = e["size"], e["sha256"], e["chunks"]
        except (TypeError, KeyError):
            raise ManifestError(f"{where}: entry {name!r} lacks size / sha256 / chunks") from None
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ManifestError(f"{where}: entry {name!r}: size {size!r} is not an integer >= 0")
        if not isinstance(chunks, list) or len(chunks) != -(-size // chunk):
            raise ManifestError(f"{where}: entry {name!r}: {len(chunks) if isinstance(chunks, list) else 'no'} "
                                f"chunk digests for {size} bytes in chunks of {chunk}")
        for d in [digest, *chunks]:
            if not (isinstance(d, str) and len(d) == 64 and all(c in "0123456789abcdef" for c in d)):
                raise ManifestError(f"{where}: entry {name!r}: {d!r} is not a SHA-256 hex digest")
        m.files[name] = FileEntry(size, digest, chunks)
    return m


def load(folder: str | os.PathLike[str]) -> Manifest:
    path = Path(folder) / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"{path}: no manifest (folders written by 'gravpipe run --out' carry one)")
    return parse(path.read_bytes(), str(path))


def hash_file(path: Path, chunk_size: int = CHUNK_SIZE) -> FileEntry:
    """Size, whole-file SHA-256 and per-chunk SHA-256 of ``path``, read once."""
    whole = hashlib.sha256()
    chunks = []
    size = 0
    with open(path, "rb") as fh:
        while block := fh.read(chunk_size):
            whole.update(block)
            chunks.append(hashlib.sha256(block).hexdigest())
            size += len(block)
    return FileEntry(size, whole.hexdigest(), chunks)


def _files_under(folder: Path, path: Path) -> Iterable[Path]:
    if path.is_dir():
        for p in sorted(path.rglob("*")):
            if p.is_file() and not p.name.startswith("."):
                yield p
    elif path.is_file():
        yield path


def record(folder: str | os.PathLike[str], paths: Iterable[str | os.PathLike[str]]) -> Manifest:
    """Add (or refresh) the entries of ``paths`` (files, or folders of a multi-file set, inside
    ``folder``) to ``folder``'s manifest, drop entries whose files are gone, and rewrite the
    manifest atomically. Call it once a file is complete under its final name."""
    folder = Path(folder)
    try:
        m = load(folder)
    except ManifestError:
        m = new_manifest()  # none yet, or unreadable: start afresh (the files are the truth)
    for name in [n for n in m.files if not (folder / n).is_file()]:
        del m.files[name]
    for p in paths:
        p = Path(p) if Path(p).is_absolute() else folder / p
        for f in _files_under(folder, p):
            name = f.relative_to(folder).as_posix()
            if name != MANIFEST_NAME:
                m.files[name] = hash_file(f, m.chunk_size)
    with atomic_open(folder / MANIFEST_NAME, "w") as fh:
        fh.write(m.to_json())
    return m


def verify_file(path: Path, name: str, m: Manifest) -> str | None:
    """None if ``path`` matches entry ``name`` of ``m``, else one line naming the fault."""
    e = m.files[name]
    if not path.is_file():
        return f"{path}: missing"
    size = path.stat().st_size
    if size != e.size:
        return f"{path}: {size} bytes, the manifest says {e.size}"
    with open(path, "rb") as fh:
        for k, want in enumerate(e.chunks):
            block = fh.read(m.chunk_size)
            if hashlib.sha256(block).hexdigest() != want:
                a, b = m.chunk_span(name, k)
                return f"{path}: chunk {k} (bytes {a}-{b - 1}) does not match the manifest"
    return None


def verify(folder: str | os.PathLike[str]) -> tuple[int, int]:
    """Check every file of ``folder``'s manifest; (files, bytes) checked, or ManifestError
    naming the first bad file and chunk. Files not in the manifest are ignored."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    m = load(folder)
    for name in sorted(m.files):
        if (fault := verify_file(folder / name, name, m)) is not None:
            raise ManifestError(fault)
    return len(m.files), m.total_bytes
