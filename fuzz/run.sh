#!/usr/bin/env bash
# Runs every libFuzzer binary in BUILD_DIR/fuzz for SECONDS seconds each
# (the Parquet metadata and encoding targets for at least 30 s).
#
#   fuzz/run.sh BUILD_DIR SECONDS
#
# Target <name>_fuzz starts from the seeds in fuzz/corpus/<name>/, copied to
# a scratch directory fuzz/corpus-run/<name>/ (gitignored) so the committed
# corpus only changes by hand. Crash, leak, timeout and OOM inputs are written
# to fuzz/corpus-run/artifacts/<name>/; reproduce one with
#   BUILD_DIR/fuzz/<name>_fuzz fuzz/corpus-run/artifacts/<name>/crash-...
# Exits non-zero if any target fails or none is found.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$1
seconds=$2
root=$(cd "$(dirname "$0")/.." && pwd)
run_dir="$root/fuzz/corpus-run"

shopt -s nullglob
targets=("$build"/fuzz/*_fuzz)
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz/run.sh: no *_fuzz binaries in $build/fuzz (configure with -DFLYWHEEL_FUZZ=ON)" >&2
  exit 1
fi

failed=()
for bin in "${targets[@]}"; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  name=${name%_fuzz}
  corpus="$run_dir/$name"
  artifacts="$run_dir/artifacts/$name"
  log="$run_dir/$name.log"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  if [ -d "$root/fuzz/corpus/$name" ]; then
    cp -a "$root/fuzz/corpus/$name/." "$corpus/"
  else
    echo "fuzz/run.sh: warning: no seed corpus fuzz/corpus/$name" >&2
  fi
  # The Parquet decoders (untrusted files from anywhere) get at least 30 s.
  run_seconds=$seconds
  case $name in
    parquet_metadata|parquet_encoding) [ "$run_seconds" -lt 30 ] && run_seconds=30 ;;
  esac
  echo "== $name: fuzzing for ${run_seconds}s ($(ls "$corpus" | wc -l) seeds)"
  "$bin" -max_total_time="$run_seconds" -timeout=25 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 "$corpus" >"$log" 2>&1
  rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)" "$log" | sed 's/^/   /'
  if [ $rc -ne 0 ]; then
    echo "== $name: FAILED (exit $rc); log $log, inputs in $artifacts" >&2
    tail -n 60 "$log" >&2
    failed+=("$name")
  else
    echo "== $name: ok ($(ls "$corpus" | wc -l) corpus entries)"
  fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz/run.sh: failing targets: ${failed[*]}" >&2
  exit 1
fi
