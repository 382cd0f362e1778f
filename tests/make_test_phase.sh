#!/usr/bin/env bash
# One phase of `make test`, timed: runs the command, appends
# "NAME<TAB>SECONDS<TAB>STATUS" to TIMES, and exits with the command's status
# (after printing the table so far when it failed).
#
#   tests/make_test_phase.sh TIMES NAME COMMAND...
#
# Cached phases (docs/build.md): with PHASE_KEY (tests/make_test_key.sh of
# this run) and PHASE_CACHE (a file of "NAME<TAB>KEY<TAB>WHEN" lines), a
# phase that already passed with the same key is not run again; it is
# reported as cached, with when it passed. A phase that passes is recorded
# there; a failed one is not. TEST_CACHE=0 runs every phase.
set -uo pipefail
times=$1 name=$2
shift 2
key=${PHASE_KEY:-} cache=${PHASE_CACHE:-}
if [ -n "$key" ] && [ -n "$cache" ] && [ "${TEST_CACHE:-1}" != 0 ] && [ -f "$cache" ]; then
  when=$(awk -F'\t' -v n="$name" -v k="$key" '$1 == n && $2 == k { w = $3 } END { print w }' "$cache")
  if [ -n "$when" ]; then
    echo "make test: phase '$name' passed at $when with these exact inputs (key $key): cached, not rerun (TEST_CACHE=0 reruns it)"
    printf '%s\t0.0\tcached (passed %s)\n' "$name" "$when" >> "$times"
    exit 0
  fi
fi
start=$(date +%s%N)
"$@"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '%s\t%d.%d\t%s\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")" >> "$times"
if [ $rc != 0 ]; then
  echo; echo "make test: phase '$name' failed; phases so far:"; tr '\t' ' ' < "$times"
elif [ -n "$key" ] && [ -n "$cache" ]; then
  # One line per phase: the latest pass.
  tmp="$cache.$$"
  { [ -f "$cache" ] && awk -F'\t' -v n="$name" '$1 != n' "$cache"; printf '%s\t%s\t%s\n' "$name" "$key" "$(date -u '+%Y-%m-%d %H:%M:%S UTC')"; } > "$tmp" && mv "$tmp" "$cache"
fi
exit $rc
