"""The plumbing every fake engine of the tests shares: real sockets, real HTTP, stdlib only.

`JsonHandler` is a quiet request handler with JSON helpers; a fake subclasses it and writes
only its routes. `LoopbackServer` serves a handler class on 127.0.0.1 in a daemon thread
(port 0: the kernel picks one) until close() or the end of its `with` block.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # a test's output is not an access log
        pass

    def _json(self, code: int, obj=None) -> None:
        """Answer `code` with `obj` as JSON; obj None sends an empty body (vLLM's /health does)."""
        data = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _json_body(self) -> dict:
        return json.loads(self._body() or b"{}")


class LoopbackServer:
    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
