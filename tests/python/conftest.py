"""Shared fixtures for the flywheel Python tests.

Run with PYTHONPATH=<build>/python (`make pytest` sets it). When it is not
set, <repo>/build/python is tried so `pytest tests/python` works after a
default build.
"""

import http.server
import os
import sys
import threading

import pytest

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import flywheel  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(_REPO, "build", "python"))
    import flywheel  # noqa: F401


@pytest.fixture
def table_path(tmp_path):
    """A path where a new table can be created."""
    return str(tmp_path / "t")


class MetricsHandler(http.server.BaseHTTPRequestHandler):
    """GET /metrics: this process's registry (flywheel.metrics_text()), or
    ``MetricsHandler.body`` when a test sets it."""
    body = ""

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path != "/metrics":
            self.send_error(404)
            return
        data = (self.body or flywheel.metrics_text()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def metrics_server():
    """This process's Prometheus endpoint on loopback (what a training script
    would serve); yields its base URL (append /metrics)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    MetricsHandler.body = ""
