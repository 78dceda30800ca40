"""benches/layout/drive.py <port> <v2|v2n|v2a|v3|real> <jobs> [setup|run|memory]: talks RESP to a private redis-server
holding benches/layout/floor.lua (no client library needed)."""
import socket
import sys


class Redis:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.rf = self.sock.makefile("rb")

    def __call__(self, *args):
        parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
        self.sock.sendall(b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts))
        return self.read()

    def read(self):
        line = self.rf.readline()
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.rf.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError(f"unexpected reply {line!r}")


port, layout, jobs, what = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
r = Redis(port)
P = "ojs:{floor}:"
if what == "setup":
    r("FUNCTION", "LOAD", "REPLACE", open("benches/layout/floor.lua", "rb").read())
    doc = ('{"type":"noop","queue":"bench","args":[1234,"%s"],"priority":3,"meta":{"trace":"abc"}}' % ("x" * 100))
    r("FCALL", "floor_setup", 0, P, jobs, doc)
elif what == "run" and layout == "real":
    # Our library as the server loaded it (the jobs were enqueued through a server, which is gone):
    # one FETCH request per call, then one ACK request per call, as floor_fetch/floor_ack do.
    lib = next(l for l in r("FUNCTION", "LIST") if l[1].startswith(b"ojs_"))[1].decode()
    version = lib[len("ojs_"):]
    P = "ojs:{main}:"
    ids = [m[-36:] for m in r("ZRANGE", P + "q:bench:ready", 0, jobs - 1)]
    for id in ids:
        got = r("FCALL", f"fetch_{version}", 2, P + "active", P + "moving", P, 86400000,
                "w1", 1, 30000, "strict", "", "", "", "", "", "", 1, "bench", 1)
        assert got[0] == b"ok" and len(got[2]) == 3, got
        acked = r("FCALL", f"fetch_{version}", 2, P + "active", P + "moving", P, 86400000,
                  "w1", 0, 30000, "strict", "", id, "", "", "", "", 0)
        assert acked[2][0][0] == b"ok", acked
elif what == "run":
    for _ in range(jobs):
        got = r("FCALL", f"floor_fetch_{layout}", 0, P, "worker-1")
        r("FCALL", f"floor_ack_{layout}", 0, P, got[0], '{"ok":true}')
elif what == "memory":
    # Bytes per queued job: the job's keys (MEMORY USAGE counts each key's own overhead).
    ids = [m[-36:] for m in r("ZRANGE", P + f"{layout}:ready", 0, 99)]
    keys = ["job"] + (["doc"] if layout == "v3" else [])
    total = sum(r("MEMORY", "USAGE", P + f"{layout}:{k}:" + i.decode(), "SAMPLES", 0) for i in ids for k in keys)
    print(total / len(ids))
