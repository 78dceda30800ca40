# Sourced by the scripts of benches/: the pieces they share.

# free_port: a TCP port nothing listens on now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ensure_valgrind: installs valgrind (apt) when missing; exits 2 when it cannot.
ensure_valgrind() {
  command -v valgrind >/dev/null 2>&1 && return 0
  echo ">> installing valgrind" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null 2>&1 ||
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null 2>&1; } ||
    { echo "!! valgrind is needed and could not be installed" >&2; exit 2; }
}

# callgrind_runs: the part of server_cpu.sh and redis_cpu.sh before their runs: the release build, the
# baseline binary checked (OJS_BASELINE_SERVER), target/bench/, a work directory removed on exit with
# the server ($spid) and Redis ($rpid) stopped, and $rows, one line per run.
callgrind_runs() {
  cargo build --release --quiet -p ojs-server -p ojs-bench
  baseline="${OJS_BASELINE_SERVER:-}"
  [ -z "$baseline" ] || [ -x "$baseline" ] ||
    { echo "!! OJS_BASELINE_SERVER=$baseline is not an executable" >&2; exit 2; }
  mkdir -p target/bench
  work=$(mktemp -d)
  trap 'kill "${spid:-}" "${rpid:-}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
  rows="$work/rows"
}
