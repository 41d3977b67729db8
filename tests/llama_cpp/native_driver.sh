#!/bin/sh
# ctest LlamaCpp.NativeDriver: the native llama.cpp driver
# (adapters/llama.cpp/native, docs/LLAMA_CPP.md "Native driver") under a
# fixed 30-case campaign with kv_unified off and on (and seq_keep behind
# finish; and with llama.cpp refusing past capacity itself), and its
# findings: each case must fail in its mode and hold in the other, and the
# llama.h reproduction must still show them and the stale state of
# docs/findings/llama_cpp_state_after_fork_stale.md (a pass means llama.cpp
# changed).
#   native_driver.sh KVCHECK DRIVER REPRO KVCHECK_EXPORT
set -u
kvcheck=$1 driver=$2 repro=$3 export=$4
scratch=$(mktemp -d) || exit 1
trap 'rm -rf "$scratch"' EXIT
fail=0

campaign() {  # BACKEND_OPTIONS
  if "$kvcheck" campaign --backend "exec:$driver $1" --cases 30 --seed 1 --time 120 \
       --no-kill-matrix >"$scratch/out" 2>&1; then
    echo "ok: campaign $1: $(tail -1 "$scratch/out")"
  else
    cat "$scratch/out"; echo "FAILED: campaign $1"; fail=1
  fi
}
campaign "--unified off"
campaign "--unified on --erase-shift off"
campaign "--unified on --erase-shift off --finish-by keep"
# llama.cpp's own capacity refusal (llama_decode 1) as kvcheck's, P9 on it.
campaign "--capacity-by llama"

# A finding's case: FILE, the options it fails with, those it holds with.
finding() {
  "$kvcheck" replay --backend "exec:$driver $2" "$1" >"$scratch/fails" 2>&1
  fails=$?
  "$kvcheck" replay --backend "exec:$driver $3" "$1" >"$scratch/holds" 2>&1
  holds=$?
  if [ "$fails" -eq 1 ] && [ "$holds" -eq 0 ]; then
    echo "ok: $1 fails with $2, holds with $3"
  else
    cat "$scratch/fails" "$scratch/holds"
    echo "CHANGED: $1: exit $fails with $2 (1 expected), $holds with $3 (0 expected)"
    fail=1
  fi
}
finding corpus/llama.cpp/native/unified_shift_after_fork.batch.fails.case \
  "--unified on" "--unified off"
finding corpus/llama.cpp/native/keep_leaves_other_streams.reset.fails.case \
  "--unified off --finish-by keep --erase-shift off" "--unified on --finish-by keep --erase-shift off"
finding corpus/llama.cpp/native/seq_div_rotates_k_backwards.oracle.fails.case \
  "--div on" "--div on --div-by add"

# llama.cpp's own capacity refusal with another sequence alive (P9: the
# other continues as if the refused steps had never been sent). Both
# refusals must be llama_decode's (KVCHECK_LLAMA_TRACE lists them), the
# step of two sequences too.
holds=corpus/llama.cpp/native/llama_refusal_companion.capacity.holds.case
if KVCHECK_LLAMA_TRACE="$scratch/trace" "$kvcheck" replay \
     --backend "exec:$driver --capacity-by llama" "$holds" >"$scratch/out" 2>&1 &&
   [ "$(grep -c '"result":"capacity"' "$scratch/trace")" -eq 2 ] &&
   grep -q '"entries":2,' "$scratch/trace"; then
  echo "ok: $holds holds with --capacity-by llama, both refusals llama_decode's"
else
  cat "$scratch/out" "$scratch/trace"
  echo "FAILED: $holds with --capacity-by llama (2 refusals by llama_decode, one of 2 entries)"
  fail=1
fi

# kvcheck-llama-repro: the two findings above and the stale state after a
# fork or a pending shift (docs/findings/llama_cpp_state_after_fork_stale.md).
"$export" --family llama --out "$scratch/m.gguf" >/dev/null || exit 1
if "$repro" "$scratch/m.gguf"; then
  echo "ok: the llama.h reproduction still shows all four"
else
  echo "CHANGED: the llama.h reproduction no longer shows all four (exit $?)"; fail=1
fi
exit $fail
