"""A stand-in OTLP/HTTP collector for benches/compare.sh (python3, stdlib only): it answers every
export 200 and keeps nothing, so a run with tracing on measures what exporting costs the server.
    python3 benches/otlp_sink.py <port>
"""
import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
