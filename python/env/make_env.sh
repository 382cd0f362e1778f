#!/usr/bin/env bash
# Creates or reuses flywheel's Python environment from a committed lock.
#
#   python/env/make_env.sh LOCK VENV [BASE_PYTHON]
#
# VENV lives outside the clone (the Makefile keys it by the lock's hash under
# ~/.cache/flywheel), so a second clone or a CI run on the same machine reuses
# it: a finished environment carries .flywheel-complete and costs nothing here.
# Packages come from PyPI as exact versions with sha256 hashes (a hashed
# requirements file: pip's format, checked with --require-hashes); uv installs
# them (pinned and hash-checked itself through bootstrap.lock), in parallel,
# hard-linking from its cache, so even a new environment takes seconds once
# the wheels are on the machine.
set -euo pipefail
lock=$1
venv=$2
base=${3:-/usr/bin/python3}
here=$(cd "$(dirname "$0")" && pwd)
cache=$(dirname "$venv")
mkdir -p "$cache"
[ -f "$venv/.flywheel-complete" ] && { echo "make deps: Python environment $venv (reused)"; exit 0; }

# One builder at a time per machine (two clones running make deps at once).
exec 9>"$cache/.lock"
flock 9
[ -f "$venv/.flywheel-complete" ] && { echo "make deps: Python environment $venv (made meanwhile)"; exit 0; }

boot_hash=$(sha256sum "$here/bootstrap.lock" | cut -c1-16)
tools="$cache/uv-$boot_hash"
if [ ! -x "$tools/bin/uv" ]; then
  echo "make deps: installing uv (python/env/bootstrap.lock) into $tools"
  rm -rf "$tools"
  "$base" -m venv "$tools"
  "$tools/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$here/bootstrap.lock"
fi

echo "make deps: creating the Python environment $venv from $lock (first time on this machine: a few GB, torch included)"
start=$(date +%s)
[ -x "$venv/bin/python" ] || "$base" -m venv --without-pip "$venv"
"$tools/bin/uv" pip sync --quiet --python "$venv/bin/python" --require-hashes "$lock"
# The extension is built against this interpreter; check the pieces it needs.
"$venv/bin/python" -c "import numpy, pybind11, torch; assert numpy.__version__ >= '2'"
touch "$venv/.flywheel-complete"
echo "make deps: Python environment ready in $(( $(date +%s) - start )) s"
