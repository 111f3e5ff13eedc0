"""Where the gate reads the engine's log from *this* start: a log file from its size at start (the
process supervisor), or the unit's journal after a cursor / for one invocation (systemd).

Both followers answer read() (new complete lines, without blocking), final() (the start's
complete log once the process has ended), history() (every start's lines), and position() /
seek() (so a later slice of the gate goes on where an earlier one stopped).
"""

from __future__ import annotations

import fcntl
import os
import subprocess


def _run_lines(cmd: list[str]) -> list[str] | None:
    try:
        out = subprocess.run(cmd, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode("utf-8", "replace").splitlines()


class FileFollower:
    """New complete lines of a log file, from a byte offset (the size at start)."""

    def __init__(self, path: str, offset: int = 0):
        self.path = path
        self.offset = offset
        self._partial = b""

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # truncated: start over
                    self.offset = 0
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        if not data:
            return []
        self.offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [ln.decode("utf-8", "replace").rstrip("\r") for ln in lines]

    def final(self) -> list[str] | None:
        """Complete lines of this start after the process ended (None: read() already has them)."""
        return None

    def history(self) -> list[str] | None:
        """Every line of the file, earlier starts included (None: unreadable)."""
        try:
            with open(self.path, "rb") as f:
                return f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None

    def position(self) -> dict:
        return {"offset": self.offset - len(self._partial)}

    def seek(self, position: dict):
        self.offset = int(position.get("offset", self.offset))
        self._partial = b""

    def close(self):
        pass


class JournalFollower:
    """`journalctl -f` for one unit after a cursor (or for one invocation), read without blocking."""

    def __init__(
        self, unit: str, cursor: str | None = None, invocation_id: str | None = None, journalctl="journalctl"
    ):
        cmd = [journalctl, "--no-pager", "-o", "cat", "-f", "--lines=all"]
        if invocation_id:
            cmd.append(f"_SYSTEMD_INVOCATION_ID={invocation_id}")
            cmd += ["+", f"UNIT={unit}", f"INVOCATION_ID={invocation_id}"]
        else:
            cmd += ["-u", unit]
        if cursor:
            cmd += ["--after-cursor", cursor]
        self.cmd = cmd
        self.once = [c for c in cmd if c != "-f"]
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        fd = self.proc.stdout.fileno()
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._partial = b""
        # Lines of this start already read by an earlier slice of the gate (see position()).
        self._skip = 0
        self.lines_read = 0

    def position(self) -> dict:
        return {"lines": self.lines_read}

    def seek(self, position: dict):
        self._skip = self.lines_read = int(position.get("lines", 0))

    def read(self) -> list[str]:
        chunks = []
        while True:
            try:
                data = os.read(self.proc.stdout.fileno(), 65536)
            except BlockingIOError:
                break
            if not data:
                break
            chunks.append(data)
        if not chunks:
            return []
        data = self._partial + b"".join(chunks)
        *lines, self._partial = data.split(b"\n")
        if self._skip:
            dropped = min(self._skip, len(lines))
            lines = lines[dropped:]
            self._skip -= dropped
        self.lines_read += len(lines)
        return [ln.decode("utf-8", "replace") for ln in lines]

    def final(self) -> list[str] | None:
        """All lines of this start, read once (journald may lag `-f` by a moment after an exit)."""
        return _run_lines(self.once)

    def history(self) -> list[str] | None:
        """Every line of the unit, before the cursor too (None: journalctl failed)."""
        cmd = list(self.once)
        if "--after-cursor" in cmd:
            i = cmd.index("--after-cursor")
            del cmd[i : i + 2]
        return _run_lines(cmd)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def journal_cursor(journalctl="journalctl") -> str | None:
    """The cursor of the newest journal entry (start following after it)."""
    out = subprocess.run(
        [journalctl, "-n", "0", "--show-cursor", "--no-pager"], capture_output=True, text=True, check=False
    )
    for line in out.stdout.splitlines():
        if line.startswith("-- cursor: "):
            return line[len("-- cursor: ") :].strip()
    return None
