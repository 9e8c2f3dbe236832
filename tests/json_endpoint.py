"""A tiny OpenAI-shaped endpoint on loopback for what the project's PolicyServer never does (fail, hang,
refuse a key): a handler answers the model listing (GET) and completions (POST) with a fixed status and
JSON body each, and ``serve`` runs it in a thread for the length of a test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonEndpoint(BaseHTTPRequestHandler):
    models: tuple[int, object] = (200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
    chat: tuple[int, object] = (200, {})

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.answer(*self.models)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer(*self.chat)

    def answer(self, status: int, body: object) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Serve ``handler`` on a free loopback port; yields the endpoint's ``.../v1`` URL (a fixture's body)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
