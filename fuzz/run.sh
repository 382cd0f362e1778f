#!/usr/bin/env bash
# Runs every libFuzzer binary in BUILD_DIR/fuzz for SECONDS seconds each
# (the Parquet metadata and encoding targets for at least 30 s), FUZZ_JOBS
# targets at a time (default: the number of CPUs; each fuzzer is one process
# on one core, so this divides the wall time without shortening any run).
#
#   [FUZZ_JOBS=N] fuzz/run.sh BUILD_DIR SECONDS
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

jobs=${FUZZ_JOBS:-$(nproc)}
[ "$jobs" -ge 1 ] 2>/dev/null || { echo "fuzz/run.sh: FUZZ_JOBS must be a positive integer" >&2; exit 2; }

# One target: its report goes to $run_dir/<name>.report (printed in target
# order once all have run) and its exit status to $run_dir/<name>.rc.
run_one() {
  local bin=$1 name corpus artifacts log run_seconds rc
  name=$(basename "$bin")
  name=${name%_fuzz}
  corpus="$run_dir/$name"
  artifacts="$run_dir/artifacts/$name"
  log="$run_dir/$name.log"
  rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts"
  {
    if [ -d "$root/fuzz/corpus/$name" ]; then
      cp -a "$root/fuzz/corpus/$name/." "$corpus/"
    else
      echo "fuzz/run.sh: warning: no seed corpus fuzz/corpus/$name"
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
      echo "== $name: FAILED (exit $rc); log $log, inputs in $artifacts"
      tail -n 60 "$log"
    else
      echo "== $name: ok ($(ls "$corpus" | wc -l) corpus entries)"
    fi
    echo $rc >"$run_dir/$name.rc"
  } >"$run_dir/$name.report" 2>&1
}

mkdir -p "$run_dir"
names=()
# The two 30-second Parquet targets first, so they overlap the short ones.
ordered=()
for bin in "${targets[@]}"; do
  case $(basename "$bin") in parquet_*) ordered=("$bin" "${ordered[@]}") ;; *) ordered+=("$bin") ;; esac
done
echo "fuzz/run.sh: ${#ordered[@]} targets, $jobs at a time"
for bin in "${ordered[@]}"; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  names+=("${name%_fuzz}")
  rm -f "$run_dir/${name%_fuzz}.rc"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_one "$bin" &
done
wait

failed=()
for name in "${names[@]}"; do
  rc=$(cat "$run_dir/$name.rc" 2>/dev/null || echo missing)
  if [ "$rc" = 0 ]; then cat "$run_dir/$name.report"; else cat "$run_dir/$name.report" >&2; failed+=("$name"); fi
done

if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz/run.sh: failing targets: ${failed[*]}" >&2
  exit 1
fi
