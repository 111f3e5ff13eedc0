"""A fake nvidia-smi that replays output recorded on a real GPU host (tests/fixtures/gpu/*) byte
for byte, so gpu_facts and the roles read it as they would read the real one."""

from __future__ import annotations

from pathlib import Path

_SMI = """#!/bin/sh
# fake nvidia-smi: replays output recorded on a real GPU host
case "$*" in
  "-q -x") cat "{d}/{prefix}nvidia-smi-q.xml" ;;
  --query-compute-apps=*) cat "{d}/{prefix}compute-apps-full.csv" ;;
  "topo -m") cat "{d}/topo-m.txt" ;;
{driver}  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_nvidia_smi(path: Path, recording: Path, prefix: str = "", driver: str | None = None) -> Path:
    """Write an executable nvidia-smi at `path` that prints the files of `recording` (those named
    `prefix`*, for the recorded variants such as busy-); with `driver`, it also answers the driver
    version query."""
    query = f'  "--query-gpu=driver_version --format=csv,noheader") echo "{driver}" ;;\n' if driver else ""
    return write_script(path, _SMI.format(d=recording, prefix=prefix, driver=query))
