"""Run the README's curl examples against live ojs-servers and check each answer (python3, stdlib only).

Started by scripts/readme-test, which provides a fresh redis-server and a freshly built ojs-server binary:
    python3 scripts/readme_test.py --bin target/release/ojs-server --redis redis://127.0.0.1:PORT README.md

The README conventions it enforces (also summed up in README.md, section Conformance):
  * Every ```sh block is read top to bottom, blocks in README order, all against one fresh server, so
    the state one example leaves is what the next one sees. A command may span lines (a trailing `\\`
    or a quote left open).
  * A `curl` command is run; `localhost:8080` becomes the test server's address.
  * The first `# => STATUS SKETCH` comment line after it is the expected answer: the status must match
    exactly and the body must match SKETCH, a JSON sketch where `…` is a wildcard: a value `…` is any
    value, a member or element `…` allows any others (without it an object must have exactly the keys
    shown and an array exactly the elements shown), and `…` inside a string matches any characters.
    A sketch whose brackets are still open goes on on the next comment lines. Text after the sketch
    is prose. Further comment lines (`#    409 … if …`) document other answers
    and are not checked. A curl command without `# =>` must answer 2xx.
  * `01…` in a command stands for the job the previous answers showed last (the first of `jobs`,
    else `job.id`), or the webhook subscription (`subscription.id`) when that came last, and `<ROLE
    key>` for the API key of that role (see scripts/serve below).
  * A `scripts/serve ARGS` line (with `VAR=value` words before it) switches the rest of its block to
    a server started with those arguments and environment (`--listen` is replaced by a free loopback
    port; `<…>` in `OJS_API_KEYS` by a generated key); the next block is back on the default server.
  * `curl -N` (SSE) runs for 2 s; the answer must be 200 with Content-Type text/event-stream, and the
    first event's `data` must match the sketch of a `# => 200 {…}` line after it, if any.
  * `<!-- readme-test: skip REASON -->` right before a block skips the block; the reason is printed.
  * Other commands (cargo, redis-cli, docker, ...) are listed as not run.
"""

import argparse
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

README = "README.md"  # the file being run, for messages
ELLIPSIS = "\u2026"
ID_PLACEHOLDER = "01" + ELLIPSIS


# ---------------------------------------------------------------------------------------------------
# JSON sketches: JSON where `…` is a wildcard


class Any:
    def __repr__(self):
        return ELLIPSIS


class Obj:
    def __init__(self, members, open_):
        self.members, self.open = members, open_


class Arr:
    def __init__(self, items, open_):
        self.items, self.open = items, open_


class Pattern:
    def __init__(self, text):
        self.text = text
        self.regex = re.compile("^" + ".*".join(re.escape(p) for p in text.split(ELLIPSIS)) + "$", re.S)


_decoder = json.JSONDecoder()


def parse_sketch(s, i=0):
    """Parse one sketch value at s[i:]; returns (pattern, index after it)."""
    i = _ws(s, i)
    if i >= len(s):
        raise ValueError("sketch ends early")
    c = s[i]
    if c == ELLIPSIS:
        return Any(), i + 1
    if c == "{":
        members, open_, i = _items(s, i + 1, "}", _member)
        return Obj(dict(members), open_), i
    if c == "[":
        items, open_, i = _items(s, i + 1, "]", parse_sketch)
        return Arr(items, open_), i
    value, i = _decoder.raw_decode(s, i)
    if isinstance(value, str) and ELLIPSIS in value:
        return Pattern(value), i
    return value, i


def _items(s, i, close, item):
    """The `item`s up to `close`, separated by commas; an item `…` marks the container as open instead.
    Returns (items, open, index after `close`)."""
    items, open_ = [], False
    i = _ws(s, i)
    if s[i : i + 1] == close:
        return items, open_, i + 1
    while True:
        i = _ws(s, i)
        if s[i : i + 1] == ELLIPSIS:
            open_, i = True, i + 1
        else:
            x, i = item(s, i)
            items.append(x)
        i = _ws(s, i)
        if s[i : i + 1] == ",":
            i += 1
        elif s[i : i + 1] == close:
            return items, open_, i + 1
        else:
            raise ValueError(f"',' or '{close}' expected at {i}")


def _member(s, i):
    key, i = _decoder.raw_decode(s, _ws(s, i))
    if not isinstance(key, str):
        raise ValueError(f"object key expected at {i}")
    i = _ws(s, i)
    if s[i : i + 1] != ":":
        raise ValueError(f"':' expected at {i}")
    value, i = parse_sketch(s, i + 1)
    return (key, value), i


def _ws(s, i):
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def mismatch(p, v, path="$"):
    """None when value v matches pattern p, else a sentence saying where and how it differs."""
    if isinstance(p, Any):
        return None
    if isinstance(p, Obj):
        if not isinstance(v, dict):
            return f"{path}: expected an object, got {json.dumps(v)[:80]}"
        for k, sub in p.members.items():
            if k not in v:
                return f"{path}: no member {k!r}"
            m = mismatch(sub, v[k], f"{path}.{k}")
            if m:
                return m
        extra = sorted(set(v) - set(p.members))
        if extra and not p.open:
            return f"{path}: members not shown (add … to allow them): {', '.join(extra)}"
        return None
    if isinstance(p, Arr):
        if not isinstance(v, list):
            return f"{path}: expected an array, got {json.dumps(v)[:80]}"
        if len(v) < len(p.items) or (len(v) != len(p.items) and not p.open):
            return f"{path}: expected {len(p.items)} element(s){' or more' if p.open else ''}, got {len(v)}"
        for n, sub in enumerate(p.items):
            m = mismatch(sub, v[n], f"{path}[{n}]")
            if m:
                return m
        return None
    if isinstance(p, Pattern):
        if isinstance(v, str) and p.regex.match(v):
            return None
        return f"{path}: expected {p.text!r}, got {json.dumps(v)}"
    same_kind = isinstance(p, bool) == isinstance(v, bool) and (
        type(p) is type(v) or (isinstance(p, (int, float)) and isinstance(v, (int, float)))
    )
    if same_kind and p == v:
        return None
    return f"{path}: expected {json.dumps(p)}, got {json.dumps(v)}"


# ---------------------------------------------------------------------------------------------------
# README parsing


class Command:
    def __init__(self, line, text):
        self.line, self.text = line, text  # text: the command, continuation lines joined
        self.expect = None  # (status, sketch text, line) from the first `# =>` after it


class Block:
    def __init__(self, line, section, skip):
        self.line, self.section, self.skip = line, section, skip
        self.commands = []


def complete(text):
    """True when text is a whole shell command (no open quote, no trailing backslash)."""
    if text.rstrip().endswith("\\"):
        return False
    try:
        shlex.split(text, comments=True)
        return True
    except ValueError:
        return False


def depth(text):
    """How many brackets of a sketch are open at its end (strings skipped)."""
    d, in_str, esc = 0, False, False
    for ch in text:
        if in_str:
            in_str, esc = (ch != '"' or esc), (ch == "\\" and not esc)
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            d += 1
        elif ch in "}]":
            d -= 1
    return d


def parse_readme(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, section, in_block, pending = [], "", None, None
    skip_re = re.compile(r"<!--\s*readme-test:\s*skip\s+(.*?)\s*-->")
    expect_re = re.compile(r"^#\s*=>\s*(\d{3})\b\s*(.*)$")
    last_nonblank = ""
    for n, raw in enumerate(lines, 1):
        if in_block is None:
            if raw.startswith("#"):
                section = raw.lstrip("#").strip()
            if raw.strip() == "```sh":
                m = skip_re.search(last_nonblank)
                in_block = Block(n, section, m.group(1) if m else None)
                pending, last_cmd, open_sketch = None, None, None
            if raw.strip():
                last_nonblank = raw
            continue
        if raw.strip() == "```":
            if pending is not None:
                raise SystemExit(f"{README}:{pending.line}: a command is not closed before the block ends")
            blocks.append(in_block)
            in_block = None
            last_nonblank = raw
            continue
        if pending is not None:
            pending.text += "\n" + raw
            if complete(pending.text):
                pending = None
            continue
        stripped = raw.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            m = expect_re.match(stripped)
            if open_sketch is not None:
                status, text, first = open_sketch.expect
                open_sketch.expect = (status, text + " " + stripped[1:].strip(), first)
                if depth(open_sketch.expect[1]) <= 0:
                    open_sketch = None
            elif m and last_cmd is not None and last_cmd.expect is None:
                last_cmd.expect = (int(m.group(1)), m.group(2), n)
                if depth(m.group(2)) > 0:
                    open_sketch = last_cmd
            elif stripped.startswith("# =>"):
                raise SystemExit(f"{README}:{n}: `# =>` needs a status and must follow a command")
            continue
        if open_sketch is not None:
            raise SystemExit(f"{README}:{open_sketch.expect[2]}: the sketch's brackets are not closed")
        cmd = Command(n, raw)
        in_block.commands.append(cmd)
        last_cmd = cmd
        if not complete(raw):
            pending = cmd
    return blocks


# ---------------------------------------------------------------------------------------------------
# Servers


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Servers:
    """ojs-server processes, one per mode (the env and arguments of a `scripts/serve` line)."""

    def __init__(self, binary, redis_url, work):
        self.binary, self.redis_url, self.work = binary, redis_url, work
        self.modes, self.procs = {}, []

    def get(self, env, args):
        key = (tuple(sorted(env.items())), tuple(args))
        if key not in self.modes:
            self.modes[key] = self._start(env, args, len(self.modes))
        return self.modes[key]

    def _start(self, env, args, n):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        full_env = dict(os.environ)
        full_env.update({"OJS_REDIS_URL": self.redis_url, "RUST_LOG": "warn"})
        # Each mode gets its own namespace, so one mode's jobs never show in another's answers.
        full_env["OJS_NAMESPACE"] = "main" if n == 0 else f"readme{n}"
        full_env.update(env)
        log = open(os.path.join(self.work, f"server-{n}.log"), "w")
        proc = subprocess.Popen([self.binary, *args, "--listen", f"127.0.0.1:{port}"], env=full_env,
                                stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/ojs/v1/health", timeout=1).read()
                return url
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.1)
        log.close()
        raise SystemExit(f"!! ojs-server {' '.join(args)} did not start; its log:\n"
                         + open(log.name, encoding="utf-8", errors="replace").read())

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def serve_mode(words):
    """(env, args, keys) for the words of a `[VAR=value ...] scripts/serve ARGS` command, or None."""
    env = {}
    i = 0
    while i < len(words) and re.match(r"^[A-Z_][A-Z0-9_]*=", words[i]):
        k, v = words[i].split("=", 1)
        env[k] = v
        i += 1
    if i >= len(words) or words[i] != "scripts/serve":
        return None
    args, rest = [], words[i + 1 :]
    j = 0
    while j < len(rest):
        if rest[j] == "--listen":
            j += 2
            continue
        if rest[j].startswith("--listen="):
            j += 1
            continue
        args.append(rest[j])
        j += 1
    keys = {}
    if "OJS_API_KEYS" in env:
        pairs = []
        for pair in env["OJS_API_KEYS"].split(","):
            role, _, key = pair.partition(":")
            if key.startswith("<") and key.endswith(">"):
                key = f"readme-test-{role}-key-0123456789"
            keys[role] = key
            pairs.append(f"{role}:{key}")
        env["OJS_API_KEYS"] = ",".join(pairs)
    return env, args, keys


# ---------------------------------------------------------------------------------------------------
# Running


class Runner:
    def __init__(self, servers, work):
        self.servers, self.work = servers, work
        self.job_id = None
        self.ran = self.failed = self.skipped = self.not_curl = 0

    def run(self, blocks):
        default = self.servers.get({}, [])
        section = None
        for b in blocks:
            curls = [c for c in b.commands if self.words(c) and self.words(c)[0] == "curl"]
            if b.section != section:
                section = b.section
                print(f"== {section}")
            if b.skip is not None:
                for c in curls:
                    print(f"  skip {README}:{c.line}: {b.skip}")
                self.skipped += len(curls)
                self.note_not_curl(b, curls)
                continue
            url, keys = default, {}
            for c in b.commands:
                words = self.words(c)
                mode = serve_mode(words) if words else None
                if mode is not None:
                    env, args, keys = mode
                    url = self.servers.get(env, args)
                    print(f"  mode {README}:{c.line}: {self.one_line(c.text)}  (as {url})")
                elif c in curls:
                    self.curl(c, url, keys)
            self.note_not_curl(b, curls)
        print(f"== {self.ran} curl commands run, {self.failed} failed, {self.skipped} skipped, "
              f"{self.not_curl} other commands not run")
        return self.failed == 0

    def note_not_curl(self, b, curls):
        others = [c for c in b.commands if c not in curls and not (self.words(c) and serve_mode(self.words(c)))]
        for c in others:
            print(f"  not run (not curl) {README}:{c.line}: {self.one_line(c.text)[:70]}")
        self.not_curl += len(others)

    @staticmethod
    def words(c):
        return shlex.split(c.text.replace("\\\n", " "), comments=True)

    @staticmethod
    def one_line(text):
        return " ".join(text.replace("\\\n", " ").split())

    def curl(self, c, url, keys):
        self.ran += 1
        text = c.text.replace("localhost:8080", url.removeprefix("http://"))
        if ID_PLACEHOLDER in text:
            if self.job_id is None:
                return self.fail(c, "uses 01… but no answer before it showed a job id")
            text = text.replace(ID_PLACEHOLDER, self.job_id)
        for role, key in keys.items():
            text = text.replace(f"<{role} key>", key)
        words = self.words(Command(c.line, text))
        sse = "-N" in words
        body_file = os.path.join(self.work, "body")
        argv = ["curl", "-sS", "-o", body_file, "-w", "%{http_code} %{content_type}",
                "--max-time", "2" if sse else "10", *words[1:]]
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True)
        ms = (time.monotonic() - t0) * 1000
        if p.returncode not in ((0, 28) if sse else (0,)):
            return self.fail(c, f"curl exited {p.returncode}: {p.stderr.strip()}")
        status_text, _, ctype = p.stdout.partition(" ")
        status = int(status_text or 0)
        body = open(body_file, encoding="utf-8", errors="replace").read()
        label = f"{status} {self.describe(c)}"
        if sse:
            if status != 200 or not ctype.startswith("text/event-stream"):
                return self.fail(c, f"SSE answer {status} {ctype!r}, expected 200 text/event-stream", body)
            sketch_text = c.expect[1].strip() if c.expect else ""
            if sketch_text[:1] == "{":
                first = next((ln[5:] for ln in body.split("\n") if ln.startswith("data:")), None)
                if first is None:
                    return self.fail(c, "no event within 2 s", body)
                why = mismatch(parse_sketch(sketch_text)[0], json.loads(first))
                if why:
                    return self.fail(c, f"first event differs from {README}:{c.expect[2]}: {why}", body)
            return print(f"  ok   {README}:{c.line}: {label}")
        value = None
        if body.strip():
            try:
                value = json.loads(body)
            except ValueError:
                pass
        if c.expect is None:
            if not 200 <= status < 300:
                return self.fail(c, f"answered {status}; a curl line with no `# =>` must answer 2xx", body)
        else:
            want, sketch_text, line = c.expect
            if status != want:
                return self.fail(c, f"answered {status}, {README}:{line} shows {want}", body)
            sketch_text = sketch_text.strip()
            if sketch_text[:1] in ("{", "["):
                try:
                    sketch, _ = parse_sketch(sketch_text)
                except ValueError as e:
                    return self.fail(c, f"{README}:{line}: cannot read the sketch: {e}")
                why = mismatch(sketch, value)
                if why:
                    return self.fail(c, f"answer differs from {README}:{line}: {why}", body)
        if isinstance(value, dict):
            job = value.get("job")
            jobs = value.get("jobs")
            # Jobs an answer claimed or wrote come before the one it acted on (an ack-and-fetch-next
            # answers with the acked `job` and the claimed `jobs`: the next command acts on the latter).
            if isinstance(jobs, list) and jobs and isinstance(jobs[0], dict) and "id" in jobs[0]:
                self.job_id = jobs[0]["id"]
            elif isinstance(job, dict) and isinstance(job.get("id"), str):
                self.job_id = job["id"]
            elif isinstance(value.get("subscription"), dict) and isinstance(value["subscription"].get("id"), str):
                self.job_id = value["subscription"]["id"]
        print(f"  ok   {README}:{c.line}: {label}  ({ms:.0f} ms)")

    def describe(self, c):
        """`METHOD /path` of a curl command, for the progress lines."""
        words = self.words(c)
        method = words[words.index("-X") + 1] if "-X" in words[:-1] else ("POST" if "-d" in words else "GET")
        path = next((w.split("8080", 1)[1] for w in words if "localhost:8080" in w), "?")
        return f"{method} {path}"

    def fail(self, c, why, body=None):
        self.failed += 1
        print(f"  FAIL {README}:{c.line}: {self.one_line(c.text)}\n       {why}")
        if body:
            print(f"       body: {body.strip()[:600]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the ojs-server binary")
    ap.add_argument("--redis", required=True, help="a Redis URL (a throw-away server: keys are written)")
    ap.add_argument("readme", nargs="?", default="README.md")
    a = ap.parse_args()
    global README
    README = a.readme
    blocks = parse_readme(a.readme)
    with tempfile.TemporaryDirectory() as work:
        servers = Servers(a.bin, a.redis, work)
        try:
            ok = Runner(servers, work).run(blocks)
        finally:
            servers.stop()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
