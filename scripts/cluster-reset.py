#!/usr/bin/env python3
"""A reset hook for the conformance runner (run.py --reset-url) on a Redis Cluster: every POST runs
FLUSHALL on each node named on the command line, then answers 204. run.py's own --redis-url resets one
node only, which leaves the other shards' keys behind when a deployment spreads over several primaries.
Usage: cluster-reset.py <port to listen on> <host:port> [host:port ...]   (test harness only)"""
import socket
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

NODES = [n.rsplit(":", 1) for n in sys.argv[2:]]


def flushall(host, port):
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
        reply = s.makefile("rb").readline()
    if not reply.startswith(b"+OK"):
        raise RuntimeError(f"FLUSHALL on {host}:{port} replied {reply!r}")


class Reset(BaseHTTPRequestHandler):
    def do_POST(self):
        try:
            for host, port in NODES:
                flushall(host, port)
            self.send_response(204)
        except Exception as e:  # the runner reports the failed reset
            self.send_response(500)
            self.log_error("reset failed: %s", e)
        self.end_headers()

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Reset).serve_forever()
