#!/usr/bin/env bash
# `make install` as a C++ user runs it: install the build into a fresh
# prefix, build tests/install/consumer against it with find_package(flywheel)
# and nothing else from the source tree, run it (a table round trip), and run
# the installed CLI.
#
#   tests/install/run.sh BUILD_DIR SCRATCH_DIR
set -euo pipefail
build=$1
scratch=$2
here=$(cd "$(dirname "$0")" && pwd)
launcher=$(command -v ccache || true)
rm -rf "$scratch" && mkdir -p "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log"
test -f "$scratch/prefix/lib/cmake/flywheel/flywheelConfig.cmake"
test -f "$scratch/prefix/include/flywheel/table/table.h"
# The consumer sees only the prefix: no path into the source or build tree.
cmake -S "$here/consumer" -B "$scratch/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$scratch/prefix" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher} \
  >"$scratch/configure.log"
if grep -rq "$(cd "$here/../.." && pwd)/src" "$scratch/prefix/lib/cmake/flywheel"; then
  echo "install: the package config points into the source tree" >&2
  exit 1
fi
cmake --build "$scratch/consumer" >"$scratch/build.log"
mkdir -p "$scratch/data"
"$scratch/consumer/consumer" "$scratch/data"
"$scratch/prefix/bin/flywheel" table head "$scratch/data/t" -n 3 | grep -q "ccc"
echo "install: ok"
