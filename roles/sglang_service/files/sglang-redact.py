#!/usr/bin/env python3
"""sglang-redact: run the engine, copy its output to stdout with the API key masked.

Usage: sglang-redact <engine argv...>   (SGLANG_API_KEY in the environment)

SGLang logs `server_args=ServerArgs(..., api_key='...')` at start-up (0.5.x), so the key
would reach the journal. The unit starts the engine through this launcher when a key is
set: the engine reads the key from its --config file (SGLang) or from the literal argument
${SGLANG_API_KEY}, replaced here by the key from the environment (vLLM); the launcher
takes the key from the EnvironmentFile (0640 root:<group>), removes it from the engine's
environment, and every output line has the key replaced by ***.
Signals are forwarded; the launcher exits like the engine (same status, same signal),
so systemd sees what it would see without it. Standard library only.
"""

import contextlib
import os
import signal
import subprocess
import sys

PLACEHOLDER = "${SGLANG_API_KEY}"
MASK = b"***"


def main() -> int:
    argv = sys.argv[1:]
    if not argv:
        sys.stderr.write("usage: sglang-redact <engine argv...>\n")
        return 2
    key = os.environ.pop("SGLANG_API_KEY", "")
    argv = [key if a == PLACEHOLDER else a for a in argv]
    if not key:
        os.execvp(argv[0], argv)
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def forward(signum, _frame):
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, forward)
    secret = key.encode()
    out = sys.stdout.buffer
    for line in iter(child.stdout.readline, b""):
        out.write(line.replace(secret, MASK))
        out.flush()
    rc = child.wait()
    if rc < 0:  # die by the same signal, as systemd would have seen without the launcher
        if -rc not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-rc, signal.SIG_DFL)
        os.kill(os.getpid(), -rc)
    return rc


if __name__ == "__main__":
    sys.exit(main())
