#!/usr/bin/env bash
# Regenerates corpus/golden/*.json: for each config below, kvcheck-export
# writes the seeded weights as safetensors and tools/reference_torch.py runs
# them in PyTorch float64. The C++ test tests/oracle/golden_test.cpp then
# rebuilds the same weights from the recorded seed and compares the oracle.
#
#   tools/make_goldens.sh [BUILD_DIR]     (default build/goldens)
#
# KVCHECK_EXPORT=path/to/kvcheck-export skips the build and uses that binary.
#
# Needs Debian's python3-torch (run as /usr/bin/python3, PyTorch 1.13) and a
# C++ toolchain; CI needs neither, it only reads the JSON files.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$repo/build/goldens}
python=${PYTHON:-/usr/bin/python3}
out_dir=$repo/corpus/golden

export_tool=${KVCHECK_EXPORT:-}
if [[ -z $export_tool ]]; then
  if [[ ! -f $build/CMakeCache.txt ]]; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DKVCHECK_CUDA=OFF -DKVCHECK_BENCH=OFF -DKVCHECK_FUZZ=OFF
  fi
  cmake --build "$build" --target kvcheck-export -j2
  export_tool=$build/tools/kvcheck-export
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# name family layers d_model heads kv_heads head_dim d_ff vocab max_pos theta eps qkv_bias
#      weight_seed n_tokens token_seed
configs=(
  # MHA with QKV bias; q width = d_model.
  "gpt2_mha   gpt2  2 32 4 4 8  128 64 32  10000 1e-05 true  101 20 1"
  # GQA, no QKV bias, q width 36 != d_model 32 (heads need not tile E).
  "gpt2_gqa   gpt2  2 32 6 2 6  96  64 24  10000 1e-05 false 202 16 2"
  # GQA with 4 query heads per KV head.
  "llama_gqa  llama 2 32 8 2 8  96  64 64  10000 1e-06 false 303 16 3"
  # MQA; a small theta makes every rotary pair turn visibly within 16 positions.
  "llama_mqa  llama 2 48 4 1 12 80  72 32  100   1e-05 false 404 16 4"
)

for line in "${configs[@]}"; do
  read -r name family layers d_model heads kv_heads head_dim d_ff vocab max_pos theta eps \
    qkv_bias seed n_tokens token_seed <<<"$line"
  model=$work/$name.safetensors
  "$export_tool" --out "$model" --seed "$seed" --family "$family" --n-layers "$layers" \
    --d-model "$d_model" --n-heads "$heads" --n-kv-heads "$kv_heads" --head-dim "$head_dim" \
    --d-ff "$d_ff" --vocab "$vocab" --max-pos "$max_pos" --rope-theta "$theta" \
    --norm-eps "$eps" --qkv-bias "$qkv_bias" >/dev/null
  # Written here from the same fields, not taken from the exporter, so the
  # reference checks the file against what was asked for.
  config=$(printf '{"family": "%s", "n_layers": %s, "d_model": %s, "n_heads": %s, "n_kv_heads": %s, "head_dim": %s, "d_ff": %s, "vocab": %s, "max_pos": %s, "rope_theta": %s, "norm_eps": %s, "qkv_bias": %s}' \
    "$family" "$layers" "$d_model" "$heads" "$kv_heads" "$head_dim" "$d_ff" "$vocab" \
    "$max_pos" "$theta" "$eps" "$qkv_bias")
  "$python" "$repo/tools/reference_torch.py" --model "$model" --config "$config" \
    --seed "$seed" --random-tokens "$n_tokens,$token_seed" \
    --name "$name: $family, n_heads $heads, n_kv_heads $kv_heads" \
    --out "$out_dir/$name.json"
done
