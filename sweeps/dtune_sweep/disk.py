"""Writing a sweep's or a tune's files on a disk that may fill up. Every write the runner makes
(the state log, a point's log, the manifest, the merged file) goes through here, so that a full
disk (ENOSPC, or EDQUOT: a quota) is one NoSpace error naming the path and the space left, never a
traceback; a state record is written whole or not at all; and a point that failed for lack of
space is told apart from one that failed on its own (a resume runs the first again)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from pathlib import Path

NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# How a program's log says it (strerror, HDF5's "errno = 28", Python's "[Errno 28]").
NO_SPACE_TEXT = re.compile(r"no space left on device|disk quota exceeded|\berrno\s*=?\s*(28|122)\b", re.IGNORECASE)
# Below this, a file system is full for a point: no results file or log fits (a failed point whose
# log the disk had no room for is empty, or cut off before its error line).
LOW_SPACE_BYTES = 64 << 10


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on the file system of `path` (or of its nearest
    existing parent); None when statvfs cannot tell."""
    p = Path(path)
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


class NoSpace(Exception):
    """The disk under `path` is full (exit 1, one line): nothing was recorded as failed for it, so
    rerunning the same command once there is room resumes. `why`: what met it, when not a write
    of `path` itself (a point that failed for lack of space)."""

    def __init__(self, path, why: str = ""):
        self.path = Path(path)
        free = free_bytes(self.path)
        where = f"in {self.path}" if why else f"cannot write {self.path}"
        where += f" ({_size_text(free)} free there)" if free is not None else ""
        super().__init__(
            f"no space left on device: {why + ' ' if why else ''}{where}: free some space, then rerun the "
            f"same command to resume"
        )


def is_no_space(e: BaseException) -> bool:
    """An OSError that says the disk (or a quota) is full: by errno, or by its text (h5py passes
    HDF5's "errno = 28" along in the message)."""
    return isinstance(e, OSError) and (e.errno in NO_SPACE_ERRNOS or bool(NO_SPACE_TEXT.search(str(e))))


@contextlib.contextmanager
def writing(path):
    """Turns a full disk met while writing `path` into NoSpace(path); other errors pass."""
    try:
        yield
    except OSError as e:
        if is_no_space(e):
            raise NoSpace(path) from None
        raise


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path` through `path`.partial and a rename: a reader sees the old file or the
    new one. On a full disk the .partial is removed (its space given back) and NoSpace raised."""
    tmp = path.with_name(path.name + ".partial")
    try:
        with writing(path):
            tmp.write_text(text)
            tmp.replace(path)
    except NoSpace:
        tmp.unlink(missing_ok=True)
        raise


def append_line(path: Path, line: str) -> None:
    """Appends `line` (one JSON record, without its newline) to a log, whole or not at all: one
    write call, fsynced; on a short or failed write the file is cut back to where it was, so a full
    disk never leaves half a line. A last line torn by a crash (kill -9, power) is ended first, so
    that this record is not glued to it (readers skip the torn one). One writer per log (the
    runner's lock). NoSpace when the disk is full; other OSErrors pass."""
    data = line.encode() + b"\n"
    with writing(path):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data
            try:
                written = os.write(fd, data)
                if written != len(data):  # a regular file takes less only when its disk is full
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)


def point_no_space(log: Path) -> str:
    """Why a failed point failed for lack of space, or "" when it did not: its log's line that
    names a full disk (the program's own error, HDF5's, MPI's), or, when the log's file system is
    nearly full (under LOW_SPACE_BYTES), that (its log may then be empty: no room for the error)."""
    try:
        with open(log, "rb") as f:
            text = f.read(1 << 20).decode(errors="replace")
    except OSError:
        text = ""
    for ln in text.splitlines():
        if NO_SPACE_TEXT.search(ln):
            return ln.strip()
    free = free_bytes(log)
    if free is not None and free < LOW_SPACE_BYTES:
        return f"its log names no error, and its disk has under {_size_text(LOW_SPACE_BYTES)} free"
    return ""
