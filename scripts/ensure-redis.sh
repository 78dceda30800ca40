# Sourced by scripts/serve, scripts/test and .ci/run: make sure redis-server is installed, installing
# Debian/Ubuntu's package when it is missing, and say so as it happens.
ensure_redis_server() {
  if command -v redis-server >/dev/null 2>&1; then
    return 0
  fi
  echo ">> redis-server is not installed; installing Debian/Ubuntu's redis-server package (apt-get)..." >&2
  local sudo=""
  if [ "$(id -u)" != "0" ]; then
    sudo="sudo"
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "!! no apt-get here: install redis-server yourself, or set OJS_REDIS_URL / OJS_TEST_REDIS_URL" >&2
    return 1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get update -qq >&2 &&
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >&2 || return 1
  # The package may start a system service; our scripts start their own servers either way.
  echo ">> redis-server installed: $(redis-server --version | cut -d' ' -f3)" >&2
}
