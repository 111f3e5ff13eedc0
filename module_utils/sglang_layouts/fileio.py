"""One atomic file writer for every file the collection writes (reports, records, supervisor state).

A reader sees either the old file or the whole new one, never a part: the bytes go to a
temporary file in the same folder (same filesystem, so the final step is a rename), are
fsynced, get their mode, and only then take the final name. The folder is fsynced after it, so
the new name survives a power loss too.

`overwrite=False` is for files that must never be replaced (result records): the final name is
made with os.link, which fails with FileExistsError when the name exists, even when two writers
race for it.
"""

from __future__ import annotations

import os
import tempfile


def _write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (a nearly full disk): loop until every byte is out."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(path: str) -> None:
    """Make a rename or link in `path` durable; a filesystem that cannot fsync a folder is let be."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str, data: str | bytes, mode: int = 0o644, overwrite: bool = True) -> str:
    """Write `data` (str is UTF-8) to `path` atomically with permissions `mode`; returns `path`.

    With overwrite=False an existing `path` is left as it is and FileExistsError is raised.
    On any error the temporary file is removed and the error propagates."""
    path = os.fspath(path)
    folder = os.path.dirname(path) or "."
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
            # before the rename: the file never has its final name with mkstemp's 0600 or a wider mode
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    fsync_dir(folder)
    return path
