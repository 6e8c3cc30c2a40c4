"""Atomic file replacement: a reader sees the old file or the complete new one, never a part.

Every writer puts its bytes under a temporary name in the target's directory
(``.<name>.tmp-<pid>-<token>``), the data are fsync'ed, the temporary file is renamed onto
the final name with ``os.replace`` (atomic on POSIX within one file system, which is why
the temporary file lives in the same directory), and the directory is fsync'ed so the
rename itself survives a power cut. On any exception the temporary file is removed. A
writer killed outright (SIGKILL, power loss) can leave a ``.<name>.tmp-*`` file behind, but
never a partial file under the final name; an existing file under that name stays intact.

Two context managers share that logic:

- ``atomic_path(path)`` yields the temporary *path*, for libraries that open files by name
  (h5py, numpy.save, ...). The body must create the file and close it.
- ``atomic_open(path, mode)`` yields an open file object (text or binary).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

# fsync of a directory is not supported everywhere (some network and FUSE file systems);
# these errors mean "cannot", not "failed", and the rename has already happened.
_DIR_FSYNC_UNSUPPORTED = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF}


def temporary_name(final: Path) -> Path:
    """A fresh hidden temporary path next to ``final``: ``.<name>.tmp-<pid>-<8 hex>``.

    The pid says which process left a stale file behind; the random token keeps two
    writers of one target in the same process (threads) apart.
    """
    return final.with_name(f".{final.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


_TEMPORARY = re.compile(r"^\..+\.tmp-(\d+)-[0-9a-f]{8}$")


def stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """The temporary files in ``folder`` (and its sub-folders: multi-file sets) that a writer
    killed outright left behind: named as ``temporary_name`` makes them, by a process that
    is no longer running on this machine. A live writer's (a pid that exists, whoever owns
    it) are not among them."""
    found = []
    for path in Path(folder).rglob(".*.tmp-*"):
        m = _TEMPORARY.match(path.name)
        if m and path.is_file() and not _process_exists(int(m.group(1))):
            found.append(path)
    return sorted(found)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process, or a number we cannot ask about: not ours to judge
    return True


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path; on normal exit make it durable and rename it onto ``path``.

    The body must create the file at the yielded path and close it before the block ends.
    On an exception in the body (or a failure while syncing or renaming) the temporary
    file is removed and the exception propagates; ``path`` is left as it was.

    Errors of the file system name ``path`` (never the temporary name) and the reason, as
    an ``OSError`` with the errno of the cause, so of the matching subclass:
    ``FileNotFoundError`` (the folder does not exist), ``NotADirectoryError``,
    ``PermissionError``, ``IsADirectoryError`` (``path`` is a folder), ``OSError`` with
    ``ENOSPC`` (disk full), ``EROFS``, ... ``.filename`` is ``path``. They are found
    before the body runs where possible: a probe file is created and removed first.
    Raises ``FileNotFoundError`` also when the body created no file.
    """
    final = Path(path)
    tmp = temporary_name(final)
    _probe(tmp, final)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"atomic write of {final}: the writer created no file at {tmp}")
        _fsync_file(tmp)
        os.replace(tmp, final)
    except OSError as exc:
        _remove_quietly(tmp)
        if not _about_target(exc, tmp, final):
            raise
        raise _write_error(final, exc.errno) from exc
    except BaseException:  # KeyboardInterrupt too: never leave the temporary file behind
        _remove_quietly(tmp)
        raise
    _fsync_directory(final.parent)


def _write_error(final: Path, code: int) -> OSError:
    """An OSError for a failed write of ``final``: errno ``code`` (so ``OSError`` picks the
    subclass), a reason in words naming the folder where that helps, ``filename=final``."""
    folder = final.parent
    reasons = {
        errno.ENOENT: f"cannot write: folder {folder} does not exist",
        errno.ENOTDIR: f"cannot write: {folder} is not a folder (a part of it is a file)",
        errno.EACCES: f"cannot write: permission denied in folder {folder}",
        errno.EPERM: f"cannot write: not permitted in folder {folder}",
        errno.EROFS: f"cannot write: folder {folder} is on a read-only file system",
        errno.ENOSPC: "cannot write: disk full (no space left on device)",
        errno.EDQUOT: "cannot write: disk quota exceeded",
        errno.EISDIR: "cannot write: it is a folder",
        errno.ENAMETOOLONG: "cannot write: file name too long",
    }
    return OSError(code, reasons.get(code, f"cannot write: {os.strerror(code)}"), str(final))


def _probe(tmp: Path, final: Path) -> None:
    """Create and remove ``tmp``: a missing folder, missing permission or a read-only or
    full file system shows up here as the OS reports it, before any data are produced,
    rather than as a library's message about the temporary name (h5py's, say)."""
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise _write_error(final, exc.errno) from exc
    os.close(fd)
    os.unlink(tmp)
    if final.is_dir():  # os.replace would fail only after all the writing
        raise _write_error(final, errno.EISDIR)


def _about_target(exc: OSError, tmp: Path, final: Path) -> bool:
    """Whether an OSError from writing concerns our file (and not, say, a file the body
    reads): a known errno and no file name, or the temporary or the final name."""
    if exc.errno is None:
        return False
    names = {None, os.fspath(tmp), os.fspath(final)}
    return all((name if name is None else os.fspath(name)) in names for name in (exc.filename, exc.filename2))


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open ``path`` for writing atomically: ``with atomic_open("x.txt") as fh: fh.write(...)``.

    ``mode`` is ``"w"`` (text) or ``"wb"`` (binary); ``open_kwargs`` (``encoding``,
    ``newline``, ...) go to ``open``. The file appears under ``path`` only when the block
    ends without an exception.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open: mode must be 'w' or 'wb', got {mode!r}")
    with atomic_path(path) as tmp:
        # "x": the temporary name is fresh, so an existing file there would be a bug
        with open(tmp, mode.replace("w", "x"), **open_kwargs) as fh:
            yield fh
            fh.flush()


def _fsync_file(path: Path) -> None:
    # fsync through a new descriptor flushes the inode's data even after the writer closed
    # its own (Linux, macOS); h5py gives no access to its descriptor.
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError as exc:
        if exc.errno in _DIR_FSYNC_UNSUPPORTED or os.name == "nt":
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIR_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
