"""A JSON HTTP server on 127.0.0.1 for tests that point a real client at hand-made answers."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (path, request headers, JSON body or None) -> (status, JSON reply)
Answer = Callable[[str, Message, Any], tuple[int, Any]]


@contextlib.contextmanager
def json_server(answer: Answer) -> Iterator[str]:
    """Serve ``answer(path, headers, body) -> (status, json)`` for GET and POST (body None
    without one) on a free port; yields ``http://127.0.0.1:<port>``."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, reply = answer(self.path, self.headers, body)
            data = json.dumps(reply).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
