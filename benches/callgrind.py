"""Reads a callgrind output file: each function's own instructions and the inclusive instructions of
each call edge (caller -> callee). Shared by benches/server_cpu.sh and benches/redis_cpu.sh."""
import collections
import re


class Profile:
    def __init__(self, path):
        names = {}
        self.own = collections.Counter()
        # out[f]: instructions spent in the calls f makes to other functions (inclusive of theirs).
        self.out = collections.Counter()
        # edge[(caller, callee)]: inclusive instructions of caller's calls to callee.
        self.edge = collections.Counter()
        cur, pending = None, None

        def nm(tok):
            m = re.match(r"\((\d+)\)(?: (.*))?", tok)
            if not m:
                return tok
            i, n = m.groups()
            if n:
                names[i] = n
            return names.get(i, i)

        for line in open(path, errors="replace"):
            line = line.rstrip("\n")
            if line.startswith("fn="):
                cur = nm(line[3:])
                continue
            if line.startswith("cfn="):
                pending = nm(line[4:])
                continue
            if line.startswith("calls="):
                continue
            if line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) < 2:
                    continue
                if pending is not None:
                    if pending != cur:
                        self.out[cur] += int(parts[1])
                        self.edge[(cur, pending)] += int(parts[1])
                    pending = None
                else:
                    self.own[cur] += int(parts[1])
        self.total = sum(self.own.values())

    def inclusive(self, pattern):
        """The largest inclusive count of a function whose name contains pattern (0 when none)."""
        keys = set(self.own) | set(self.out)
        return max((self.own[k] + self.out[k] for k in keys if pattern in k), default=0)

    def exact(self, name):
        return self.own[name] + self.out[name]
