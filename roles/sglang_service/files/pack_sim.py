"""Pack sglang_sim/ and sglang_layouts/ into one reproducible .tar.gz.

Usage: pack_sim.py <folder holding sglang_sim> <folder holding sglang_layouts> <output .tar.gz>
Same sources -> byte-identical archive (sorted members, mtime 0, root owner, fixed modes,
no __pycache__), so copying it is idempotent. Written atomically; unchanged output is left alone.
"""

import gzip
import io
import os
import sys
import tarfile


def members(sim_root, lib_root):
    for base, prefix in (
        (os.path.join(sim_root, "sglang_sim"), "sglang_sim"),
        (os.path.join(lib_root, "sglang_layouts"), "sglang_layouts"),
    ):
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
            rel = os.path.relpath(dirpath, base)
            arcdir = prefix if rel == "." else os.path.join(prefix, rel)
            yield arcdir, None
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")) or name.startswith("."):
                    continue
                yield os.path.join(arcdir, name), os.path.join(dirpath, name)


def build(sim_root, lib_root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, path in members(sim_root, lib_root):
            info = tarfile.TarInfo(arcname)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            if path is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                with open(path, "rb") as f:
                    data = f.read()
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    return out.getvalue()


def main():
    sim_root, lib_root, dest = sys.argv[1:4]
    data = build(sim_root, lib_root)
    try:
        with open(dest, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
    tmp = f"{dest}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, dest)


if __name__ == "__main__":
    main()
