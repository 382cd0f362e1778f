#!/usr/bin/env bash
# The main job for now (`make demo`): one end-to-end table session with the
# `flywheel` CLI. Creates a table, appends twice, deletes by predicate,
# reads an older version (time travel), tags, compacts, expires and vacuums,
# printing each step.
set -euo pipefail
FLYWHEEL=${1:-build/src/flywheel/cli/flywheel}
DIR=$(mktemp -d /tmp/flywheel-demo.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
T="$DIR/episodes"

step() { printf '\n\033[1m$ flywheel %s\033[0m\n' "$*"; "$FLYWHEEL" "$@"; }

echo "flywheel demo: a versioned table in $T"
step table create "$T" --schema "episode:int64, reward:float32, obs:float32[4], agent:string, tokens:list<int32>?"

# 1000 rows of synthetic episodes.
gen() {  # gen FIRST COUNT
  awk -v first="$1" -v n="$2" 'BEGIN {
    for (i = first; i < first + n; i++) {
      printf("{\"episode\": %d, \"reward\": %.2f, \"obs\": [%.1f, %.1f, %.1f, %.1f], \"agent\": \"agent-%d\", \"tokens\": %s}\n",
             i, (i * 37 % 100) / 10.0, i, i + 0.5, -i, i / 2.0, i % 4, (i % 5 == 0) ? "null" : "[" i ", " i + 1 "]")
    }
  }'
}
gen 0 600 > "$DIR/part1.jsonl"
gen 600 400 > "$DIR/part2.jsonl"
step table append "$T" --jsonl "$DIR/part1.jsonl" --property source=part1.jsonl
step table append "$T" --jsonl "$DIR/part2.jsonl" --property source=part2.jsonl
step table tag "$T" before-cleanup
step table delete "$T" --where "reward < 1.0"
step table head "$T" -n 5
echo
echo "# time travel: version 2 still has the first 600 rows, low rewards included"
step table head "$T" --version 2 -n 3 --columns episode,reward
step table compact "$T"
step table show "$T"
step table log "$T"
step table expire "$T" --keep-last 2
step table vacuum "$T" --grace 0s
step table head "$T" --tag before-cleanup -n 3 --columns episode,reward,agent
echo
echo "demo finished: every step above ran against $T"
