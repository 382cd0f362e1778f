#!/usr/bin/env bash
# The inputs of `make test`'s test phases as one SHA-256: the content of
# every file git tracks or would track (untracked, not ignored), the
# compilers, the Python environment, the Debian packages, the kernel, and
# the settings that change what the phases run. tests/make_test_phase.sh
# skips a phase that passed before with the same key (docs/build.md, "Cached
# phases").
#
#   tests/make_test_key.sh PYTHON [SETTING=VALUE ...]
set -u  # best effort: a probe that fails adds nothing to the key, never fails make test
python=$1
shift
# Outside a git checkout the files cannot be listed: a key that never repeats
# (nothing is cached).
if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "uncached-$(date +%s%N)-$$"
  exit 0
fi
{
  git ls-files -co --exclude-standard -z | sort -z | xargs -0 -r sha256sum
  c++ --version 2>/dev/null | head -1
  clang++ --version 2>/dev/null | head -1
  readlink -f "$python"
  "$python" -c 'import sys; print(sys.version)'
  sha256sum python/env/*.lock 2>/dev/null || true
  dpkg-query -W -f '${Package} ${Version}\n' 2>/dev/null | sha256sum
  uname -srm
  printf '%s\n' "$@"
  env | grep -E '^(FLYWHEEL_|CC=|CXX=|CFLAGS=|CXXFLAGS=|LDFLAGS=)' | sort || true
} | sha256sum | cut -c1-32
