#!/usr/bin/env bash
# One phase of `make test`, timed: runs the command, appends
# "NAME<TAB>SECONDS<TAB>STATUS" to TIMES, and exits with the command's status
# (after printing the table so far when it failed).
#
#   tests/make_test_phase.sh TIMES NAME COMMAND...
set -uo pipefail
times=$1 name=$2
shift 2
start=$(date +%s%N)
"$@"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
printf '%s\t%d.%d\t%s\n' "$name" $((ms / 1000)) $((ms % 1000 / 100)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")" >> "$times"
if [ $rc != 0 ]; then
  echo; echo "make test: phase '$name' failed; phases so far:"; tr '\t' ' ' < "$times"
fi
exit $rc
