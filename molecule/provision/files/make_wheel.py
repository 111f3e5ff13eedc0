"""Write a tiny pure-Python wheel: make_wheel.py OUTDIR NAME VERSION [REQUIRES ...].

Molecule `provision` builds its offline wheelhouse with this on the controller: no index and
no build backend are needed (the controller's venv has no `wheel` package, and the scenario
must not depend on the network for its offline path). The wheel is a real one for pip:
dist-info with METADATA, WHEEL and a RECORD of sha256 hashes. Its one module, NAME with '-'
as '_', holds __version__ = VERSION.
"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path

# A fixed date: the same inputs give the same bytes, so copying the wheel again changes nothing.
_DATE = (2026, 1, 1, 0, 0, 0)


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def make_wheel(outdir: Path, name: str, version: str, requires: list[str]) -> Path:
    module = name.replace("-", "_")
    dist_info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{dist_info}/METADATA": (
            "Metadata-Version: 2.1\n"
            f"Name: {name}\n"
            f"Version: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
        ).encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: make_wheel.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/top_level.txt": f"{module}\n".encode(),
    }
    record = [_record_line(p, d) for p, d in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    outdir.mkdir(parents=True, exist_ok=True)
    path = outdir / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p, d in files.items():
            zf.writestr(zipfile.ZipInfo(p, _DATE), d)
    return path


if __name__ == "__main__":
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(make_wheel(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]))
