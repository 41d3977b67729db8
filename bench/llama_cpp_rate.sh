#!/bin/sh
# P1 cases per second on llama.cpp (adapters/llama.cpp/engine.mjs), generated
# models and one fixed model side by side in one run, and where the adapter's
# time goes (docs/PERFORMANCE.md, "llama.cpp through the exec adapter").
# Alternates a P1 campaign on generated models (--scenarios-per-model N) with
# one on a fixed checkpoint (--model), ROUNDS times each, SECONDS each, and
# prints per run: cases, cases/s, models loaded (distinct models: kvcheck
# keeps a loaded model until it has 8 idle ones, the adapter converts each
# content once), models per minute, and the adapter's milliseconds per
# request kind (KVCHECK_LLAMA_TIMES).
#   bench/llama_cpp_rate.sh [KVCHECK] [SECONDS] [ROUNDS] [N]
# Defaults: build/release/tools/kvcheck, 30, 2, 20. Needs the adapter's
# node_modules (ci/setup).
set -eu
kvcheck=${1:-build/release/tools/kvcheck}
seconds=${2:-30}
rounds=${3:-2}
per_model=${4:-20}
export_tool=$(dirname "$kvcheck")/kvcheck-export
work=$(mktemp -d "${TMPDIR:-/tmp}/kvcheck-llama-rate-XXXXXX")
trap 'rm -rf "$work"' EXIT

# The fixed model: 2 layers, d_model 32, 4 query heads over 2 KV heads of 8,
# as a Hugging Face checkpoint (kvcheck-export's safetensors + config.json).
mkdir "$work/model"
cat > "$work/kv.json" <<'EOF'
{"family":"llama","n_layers":2,"d_model":32,"n_heads":4,"n_kv_heads":2,"head_dim":8,"d_ff":64,
 "vocab":64,"max_pos":96,"rope_theta":10000,"norm_eps":1e-5,"qkv_bias":false}
EOF
"$export_tool" --config "$work/kv.json" --seed 7 --out "$work/model/model.safetensors" >/dev/null
cat > "$work/model/config.json" <<'EOF'
{"model_type":"llama","vocab_size":64,"hidden_size":32,"intermediate_size":64,"num_hidden_layers":2,
 "num_attention_heads":4,"num_key_value_heads":2,"head_dim":8,"max_position_embeddings":96,
 "rope_theta":10000.0,"rms_norm_eps":1e-5,"tie_word_embeddings":false}
EOF

# One campaign: its summary's case count and the adapter's times.
run() {
  label=$1
  shift
  times="$work/times.json"
  rm -f "$times"
  out=$(KVCHECK_LLAMA_TIMES=$times "$kvcheck" campaign --backend "exec:node adapters/llama.cpp/engine.mjs" \
    --property oracle --time "$seconds" --no-kill-matrix --failures "$work/failures" "$@" 2>&1 | tail -n 3)
  cases=$(printf '%s\n' "$out" | sed -n 's/.* in \([0-9.]*\) s: \([0-9]*\) property cases.*/\2 \1/p')
  node -e '
    const [label, cases, wall, file] = process.argv.slice(1);
    const t = JSON.parse(require("fs").readFileSync(file, "utf8"));
    const loads = t.load?.count ?? 0;
    const parts = Object.entries(t).map(([k, v]) => `${k} ${v.count}x${(v.ms / v.count).toFixed(2)}ms`).join(", ");
    console.log(`${label}: ${cases} cases in ${wall} s = ${(cases / wall).toFixed(1)} cases/s; ` +
                `${loads} models loaded = ${(loads / wall * 60).toFixed(0)} per minute`);
    console.log(`  adapter: ${parts}`);
  ' "$label" $cases "$times"
}

for round in $(seq 1 "$rounds"); do
  run "generated models, --scenarios-per-model $per_model (round $round)" --seed "$round" \
    --scenarios-per-model "$per_model"
  run "fixed model, --model (round $round)" --seed "$round" --model "$work/model"
done
