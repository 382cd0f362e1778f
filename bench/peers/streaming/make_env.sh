#!/usr/bin/env bash
# Creates or reuses the Python environment of the Mosaic Streaming peer and
# prints its interpreter (the last line of output).
#
#   bench/peers/streaming/make_env.sh [BASE_PYTHON]
#
# Mosaic Streaming pins numpy<2.2, so it cannot live in flywheel's own
# environment: it gets one of its own, made from requirements.lock beside this
# script (exact versions with sha256 hashes) the way python/env/make_env.sh
# makes the main one, under ~/.cache/flywheel (FLYWHEEL_CACHE) keyed by the
# lock's hash: streaming-<first 16 hex of sha256(lock)>. It uses the uv that
# python/env/bootstrap.lock pins (installing it like make_env.sh does when it
# is missing); torch is the main lock's version, so its wheel comes from
# uv's cache. A finished environment carries .flywheel-complete.
set -euo pipefail
base=${1:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
lock="$here/requirements.lock"
cache=${FLYWHEEL_CACHE:-$HOME/.cache/flywheel}
venv="$cache/streaming-$(sha256sum "$lock" | cut -c1-16)"
mkdir -p "$cache"
if [ ! -f "$venv/.flywheel-complete" ]; then
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -f "$venv/.flywheel-complete" ]; then
    boot="$root/python/env/bootstrap.lock"
    tools="$cache/uv-$(sha256sum "$boot" | cut -c1-16)"
    if [ ! -x "$tools/bin/uv" ]; then
      echo "streaming env: installing uv (python/env/bootstrap.lock) into $tools" >&2
      rm -rf "$tools"
      "$base" -m venv "$tools"
      "$tools/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$boot"
    fi
    echo "streaming env: creating $venv from $lock" >&2
    start=$(date +%s)
    [ -x "$venv/bin/python" ] || "$base" -m venv --without-pip "$venv"
    "$tools/bin/uv" pip sync --quiet --python "$venv/bin/python" --require-hashes "$lock" >&2
    "$venv/bin/python" -c "import numpy, torch, streaming" >&2
    touch "$venv/.flywheel-complete"
    echo "streaming env: ready in $(( $(date +%s) - start )) s" >&2
  fi
fi
echo "$venv/bin/python"
