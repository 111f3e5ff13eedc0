"""fileio.write_atomic on a real filesystem: whole file or old file, the mode before the final name,
no temporary file left behind, and overwrite=False never replacing what is there."""

import errno
import os
import stat

import pytest
from sglang_layouts import fileio


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_text_and_bytes_with_the_mode(tmp_path):
    p = tmp_path / "a.json"
    assert fileio.write_atomic(str(p), "é\n", mode=0o640) == str(p)
    assert p.read_bytes() == "é\n".encode()
    assert _mode(p) == 0o640
    fileio.write_atomic(p, b"\x00\x01", mode=0o600)
    assert p.read_bytes() == b"\x00\x01" and _mode(p) == 0o600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json"]


def test_the_mode_is_set_before_the_file_gets_its_name(tmp_path, monkeypatch):
    seen = {}
    real = os.replace

    def replace(src, dst):
        seen["mode"] = _mode(src)
        real(src, dst)

    monkeypatch.setattr(fileio.os, "replace", replace)
    fileio.write_atomic(str(tmp_path / "r"), "x", mode=0o644)
    assert seen["mode"] == 0o644


def test_overwrite_false_refuses_an_existing_file_and_leaves_it(tmp_path):
    p = tmp_path / "record.json"
    fileio.write_atomic(str(p), "first", overwrite=False)
    with pytest.raises(FileExistsError):
        fileio.write_atomic(str(p), "second", overwrite=False)
    assert p.read_text() == "first"
    assert [x.name for x in tmp_path.iterdir()] == ["record.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    p = tmp_path / "REPORT.md"
    p.write_text("old")

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        fileio.write_atomic(str(p), "new")
    assert p.read_text() == "old"
    assert [x.name for x in tmp_path.iterdir()] == ["REPORT.md"]


def test_short_writes_still_write_every_byte(tmp_path, monkeypatch):
    real = os.write
    monkeypatch.setattr(fileio.os, "write", lambda fd, data: real(fd, bytes(data[:3])))
    fileio.write_atomic(str(tmp_path / "f"), "0123456789" * 10)
    assert (tmp_path / "f").read_text() == "0123456789" * 10
