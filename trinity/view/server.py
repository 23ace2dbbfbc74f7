"""The web viewer: a small HTTP server on 127.0.0.1 over one experience source.

Routes: ``/`` (a page of experiences; ``?offset=&limit=``), ``/experience/<i>`` (one
experience with its per-token log-probabilities), ``/api/experiences?offset=&limit=``
(the same data as JSON). The server only reads; it binds to the loopback address so
the run's data is not exposed to the network.
"""

from __future__ import annotations

import json
import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from trinity.view.records import ExperienceSource
from trinity.view.render import detail_html, list_html

HOST = "127.0.0.1"
MAX_LIMIT = 500
_DETAIL = re.compile(r"^/experience/(\d+)$")


class BadRequest(ValueError):
    pass


def make_server(
    source: ExperienceSource, port: int = 0, default_limit: int = 20
) -> ThreadingHTTPServer:
    """A server bound to 127.0.0.1:``port`` (0: any free port; see ``server.server_port``)."""
    lock = threading.Lock()  # one database read at a time

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
            url = urlparse(self.path)
            query = parse_qs(url.query)
            try:
                with lock:
                    if url.path == "/":
                        offset, limit = _paging(query, default_limit)
                        total = source.count()
                        views = source.page(offset, limit)
                        self._send(
                            HTTPStatus.OK,
                            "text/html",
                            list_html(views, total, offset, limit, source.path),
                        )
                    elif url.path == "/api/experiences":
                        offset, limit = _paging(query, default_limit)
                        payload = {
                            "total": source.count(),
                            "offset": offset,
                            "experiences": [v.to_json() for v in source.page(offset, limit)],
                        }
                        self._send(HTTPStatus.OK, "application/json", json.dumps(payload))
                    elif match := _DETAIL.match(url.path):
                        index = int(match.group(1))
                        views = source.page(index, 1)
                        if not views:
                            self._send(
                                HTTPStatus.NOT_FOUND, "text/plain", f"no experience {index}\n"
                            )
                        else:
                            self._send(
                                HTTPStatus.OK, "text/html", detail_html(views[0], source.count())
                            )
                    else:
                        self._send(HTTPStatus.NOT_FOUND, "text/plain", f"no page {url.path}\n")
            except BadRequest as exc:
                self._send(HTTPStatus.BAD_REQUEST, "text/plain", f"{exc}\n")

        def _send(self, status: HTTPStatus, content_type: str, body: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", f"{content_type}; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass  # keep the terminal for the URL line

    return ThreadingHTTPServer((HOST, port), Handler)


def _paging(query: dict[str, list[str]], default_limit: int) -> tuple[int, int]:
    try:
        offset = int(query.get("offset", ["0"])[0])
        limit = int(query.get("limit", [str(default_limit)])[0])
    except ValueError:
        raise BadRequest("offset and limit must be integers") from None
    if offset < 0 or not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"need offset >= 0 and 1 <= limit <= {MAX_LIMIT}")
    return offset, limit
