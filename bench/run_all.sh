#!/usr/bin/env bash
# Runs every flywheel benchmark and writes bench/results/*.json, then prints a
# summary table (figure, same-run baseline, ratio). Called by `make bench`.
#
#   bash bench/run_all.sh [BUILD_DIR]        (default: build)
#
# Environment:
#   FW_BENCH_ROWS     rows for table_bench (default 1000000)
#   FW_BENCH_REPEATS  runs per figure, best reported (default 3)
#   FW_BENCH_ONLY     space-separated subset of: format table commit replay replay_service envs rl loader
#                     parquet catalog catalog_smoke erase erase_smoke metrics metrics_smoke peers (peers: Arrow
#                     export vs mapped IPC, take vs Lance/Parquet/IPC, an epoch vs Grain/HF datasets/Mosaic
#                     Streaming/torch DataLoader, from Python), (catalog_smoke: catalog_bench --quick,
#                     ~10 s, keeps no results; erase_smoke: erase_bench --quick, ~10 s, keeps no results;
#                     the smoke runs are not in the default set)
#   FW_BENCH_TMP      scratch parent directory (default /tmp)
# Method and latest figures: docs/benchmarks.md.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
BIN="$BUILD/bench"
OUT="$ROOT/bench/results"
ROWS="${FW_BENCH_ROWS:-1000000}"
REPEATS="${FW_BENCH_REPEATS:-3}"
ONLY="${FW_BENCH_ONLY:-format table commit replay replay_service envs rl loader parquet catalog erase metrics peers llm weight_sync}"
TMP="${FW_BENCH_TMP:-/tmp}"
PYTHON="${PYTHON:-$(make -s -C "$ROOT" python-path)}"

# Benchmarks are not in the default build (make test runs none): build them here.
if [[ -f "$BUILD/build.ninja" ]]; then
  cmake --build "$BUILD" --target benches
fi
for b in table_bench commit_bench format_bench replay_bench replay_service_bench envs_bench; do
  if [[ ! -x "$BIN/$b" ]]; then
    echo "run_all.sh: $BIN/$b is missing; build the benchmarks first (cmake --build $BUILD --target benches)" >&2
    exit 1
  fi
done
mkdir -p "$OUT"

# The DuckDB peer (Node). Without node or the npm registry, table_bench skips
# the DuckDB comparison and says so.
PEERS="$ROOT/bench/peers"
if [[ ! -d "$PEERS/node_modules/@duckdb/node-api" ]]; then
  if command -v npm >/dev/null 2>&1; then
    echo "== npm install in bench/peers (DuckDB peer)"
    (cd "$PEERS" && npm install --no-audit --no-fund) || echo "run_all.sh: npm install failed; DuckDB peer will be skipped" >&2
  else
    echo "run_all.sh: npm not found; DuckDB peer will be skipped" >&2
  fi
fi

echo "== flywheel benchmarks: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for what in $ONLY; do
  case "$what" in
    format)
      echo; echo "== format_bench"
      "$BIN/format_bench" --out="$OUT" --tmp="$TMP" --benchmark_repetitions="$REPEATS" ;;
    table)
      echo; echo "== table_bench"
      "$BIN/table_bench" --rows="$ROWS" --repeats="$REPEATS" --out="$OUT" --tmp="$TMP" --peers_dir="$PEERS" ;;
    commit)
      echo; echo "== commit_bench"
      "$BIN/commit_bench" --repeats="$REPEATS" --out="$OUT" --tmp="$TMP" ;;
    replay)
      echo; echo "== replay_bench"
      "$BIN/replay_bench" --out="$OUT" ;;
    replay_service)
      echo; echo "== replay_service_bench (loopback gRPC vs a raw gRPC stream; 7-10 min at 3 repeats)"
      "$BIN/replay_service_bench" --repeats="$REPEATS" --out="$OUT" ;;
    envs)
      echo; echo "== envs_bench (EnvPool on CartPole vs a plain Python loop; $PYTHON runs the Python side)"
      "$BIN/envs_bench" --repeats="$REPEATS" --out="$OUT" --pythonpath="$BUILD/python" --python="$PYTHON" ;;
    rl)
      echo; echo "== rl_bench (flywheel run: PPO and IMPALA on CartPole vs the same PPO in one synchronous process; 3 seeds, ~1 min)"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/rl_bench.py" --bin "$BUILD/src/flywheel/cli/flywheel" \
        --out "$OUT/rl.json" ;;
    loader)
      echo; echo "== loader (flywheel.Loader vs torch DataLoader and raw read(); JPEG vs PIL + DataLoader; packing; resume)"
      "$BIN/loader_bench" --out="$OUT"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/loader_e2e.py" --out "$OUT/loader.json"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/jpeg_e2e.py" --out "$OUT/jpeg.json" ;;
    peers)
      echo; echo "== peers (Arrow export vs mapped Arrow IPC; take vs Lance, Parquet, IPC; an epoch vs Grain, HF datasets, Mosaic Streaming, torch DataLoader)"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/arrow_export.py" --out "$OUT/arrow_export.json" --tmp "$TMP"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/take_peers.py" --out "$OUT/take_peers.json" --tmp "$TMP"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/epoch_peers.py" --out "$OUT/epoch_peers.json" --tmp "$TMP" ;;
    parquet)
      echo; echo "== parquet_bench (our Parquet reader vs DuckDB at 1 and 2 threads; ingest MB/s)"
      "$BIN/parquet_bench" --repeats="$REPEATS" --out="$OUT" --tmp="$TMP" ;;
    catalog)
      echo; echo "== catalog_bench (catalog writes with 4 writer processes vs 1; lineage walks vs one point query; SQLite and a throwaway PostgreSQL; ~1.5-3 min)"
      "$BIN/catalog_bench" --repeats="$REPEATS" --out="$OUT" --tmp="$TMP" ;;
    catalog_smoke)
      echo; echo "== catalog_bench --quick (smoke run of both backends, ~10 s; no results file)"
      "$BIN/catalog_bench" --quick --tmp="$TMP" ;;
    erase)
      echo; echo "== erase_bench (Table::Erase vs total rows, retained versions, fragments holding the key, beside a full key-column scan; medians of 5 unless FW_BENCH_REPEATS is set; ~1 min)"
      "$BIN/erase_bench" ${FW_BENCH_REPEATS:+--repeats="$FW_BENCH_REPEATS"} --out="$OUT" --tmp="$TMP" ;;
    erase_smoke)
      echo; echo "== erase_bench --quick (smoke run, ~10 s; no results file)"
      "$BIN/erase_bench" --quick --tmp="$TMP" ;;
    metrics)
      echo; echo "== metrics_bench (metrics on vs off on the replay and loader hot paths, back-to-back pairs; ~1.5 min)"
      "$BIN/metrics_bench" --out="$OUT" --tmp="$TMP" ;;
    llm)
      echo; echo "== llm_generate_bench (rollout engine vs transformers generate() and llama.cpp's batch API; SmolLM2 and a 10M model at batch 1/16/64; ~10 min; needs make model, make peers for llama.cpp)"
      PYTHONPATH="$BUILD/python" "$PYTHON" "$ROOT/bench/llm_generate_bench.py" --out "$OUT/llm_generate.json" ;;
    weight_sync)
      echo; echo "== weight_sync_bench (publish -> 2 engines serving SmolLM2's new version vs a raw loopback gRPC stream; ~30 s; needs make model)"
      "$BIN/weight_sync_bench" --runs=5 --out="$OUT" ;;
    metrics_smoke)
      echo; echo "== metrics_bench --quick (smoke run, a few seconds; no results file)"
      "$BIN/metrics_bench" --quick --tmp="$TMP" ;;
    *) echo "run_all.sh: unknown benchmark '$what' (format table commit replay replay_service envs rl loader parquet catalog catalog_smoke erase erase_smoke metrics metrics_smoke peers llm weight_sync)" >&2; exit 2 ;;
  esac
done

echo
echo "== summary (bench/results/*.json; each figure best of $REPEATS runs)"
"$PYTHON" - "$OUT" <<'EOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = []
for name in ["table_write", "table_scan", "table_take", "commit", "format_bench", "replay", "replay_service", "envs", "catalog", "erase", "metrics", "weight_sync"]:
    p = out / f"{name}.json"
    if not p.exists():
        continue
    j = json.loads(p.read_text())
    for r in j["results"]:
        rows.append((name, r["name"], f'{r["value"]:.4g} {r["unit"]}', r["baseline"],
                     f'{r["baseline_value"]:.4g}', f'{r["ratio"]:.3f}', r.get("note", "")))
    m = j["machine"]
header = ("file", "figure", "value", "baseline (same run)", "baseline", "ratio", "note")
widths = [max(len(str(x[i])) for x in rows + [header]) for i in range(len(header))]
fmt = "  ".join("{:<%d}" % w for w in widths)
print(fmt.format(*header))
print(fmt.format(*["-" * w for w in widths]))
for r in rows:
    print(fmt.format(*r))
if rows:
    print(f'\nmachine: {m["cpu_model"]}, {m["nproc"]} CPUs, {m["mem_total"]}, {m["kernel"]}, '
          f'commit {m["git_commit"][:12]}{" (dirty)" if m["git_dirty"] else ""}')
EOF
