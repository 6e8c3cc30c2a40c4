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


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path; on normal exit make it durable and rename it onto ``path``.

    The body must create the file at the yielded path and close it before the block ends.
    On an exception in the body (or a failure while syncing or renaming) the temporary
    file is removed and the exception propagates; ``path`` is left as it was.

    Raises ``FileNotFoundError`` if the body created no file, and whatever ``os.replace``
    raises (e.g. ``IsADirectoryError`` when ``path`` is a directory).
    """
    final = Path(path)
    tmp = temporary_name(final)
    try:
        yield tmp
        if not tmp.is_file():
            raise FileNotFoundError(f"atomic write of {final}: the writer created no file at {tmp}")
        _fsync_file(tmp)
        os.replace(tmp, final)
    except BaseException:  # KeyboardInterrupt too: never leave the temporary file behind
        _remove_quietly(tmp)
        raise
    _fsync_directory(final.parent)


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
