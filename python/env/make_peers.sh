#!/usr/bin/env bash
# Builds the peers PyPI ships as source (python/env/peers.lock: llama.cpp's
# Python binding) once per machine into PEERS/<lock hash>, a folder the
# benchmarks and tests put on sys.path (`make peers`; uv caches the built wheel,
# so a rebuilt folder takes seconds). The build compiles llama.cpp for this
# CPU (GGML_NATIVE), about 10 minutes on 2 cores the first time.
#
#   python/env/make_peers.sh PEERS VENV_PYTHON UV [JOBS]
set -euo pipefail
peers=$1
python=$2
uv=$3
jobs=${4:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
out="$peers/$(sha256sum "$here/peers.lock" | cut -c1-16)"
[ -f "$out/.flywheel-complete" ] && { echo "make peers: $out (reused)"; exit 0; }
mkdir -p "$peers"
exec 9>"$peers/.lock"
flock 9
[ -f "$out/.flywheel-complete" ] && { echo "make peers: $out (made meanwhile)"; exit 0; }
echo "make peers: building llama-cpp-python into $out (first time on this machine: ~10 min on 2 cores)"
start=$(date +%s)
rm -rf "$out"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
  "$uv" pip install --quiet --no-deps --require-hashes --python "$python" --target "$out" -r "$here/peers.lock"
touch "$out/.flywheel-complete"
echo "make peers: ready in $(( $(date +%s) - start )) s"
