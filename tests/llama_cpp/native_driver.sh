#!/bin/sh
# ctest LlamaCpp.NativeDriver: the native llama.cpp driver
# (adapters/llama.cpp/native, docs/LLAMA_CPP.md "Native driver") under a
# fixed 30-case campaign with kv_unified off and on, and its finding: the
# case must fail with the unified cache and pass without it, and the llama.h
# reproduction must still show it (a pass of either means llama.cpp changed).
#   native_driver.sh KVCHECK DRIVER REPRO KVCHECK_EXPORT
set -u
kvcheck=$1 driver=$2 repro=$3 export=$4
case_file=corpus/llama.cpp/native/unified_shift_after_fork.batch.fails.case
scratch=$(mktemp -d) || exit 1
trap 'rm -rf "$scratch"' EXIT
fail=0

campaign() {  # BACKEND_OPTIONS
  if "$kvcheck" campaign --backend "exec:$driver $1" --cases 30 --seed 1 --time 120 \
       --no-kill-matrix >"$scratch/out" 2>&1; then
    echo "ok: campaign --unified $1: $(tail -1 "$scratch/out")"
  else
    cat "$scratch/out"; echo "FAILED: campaign $1"; fail=1
  fi
}
campaign "--unified off"
campaign "--unified on --erase-shift off"

"$kvcheck" replay --backend "exec:$driver --unified on" "$case_file" >"$scratch/on" 2>&1
on=$?
"$kvcheck" replay --backend "exec:$driver --unified off" "$case_file" >"$scratch/off" 2>&1
off=$?
if [ "$on" -eq 1 ] && [ "$off" -eq 0 ]; then
  echo "ok: $case_file fails with --unified on, holds with --unified off"
else
  cat "$scratch/on" "$scratch/off"
  echo "CHANGED: $case_file: exit $on with --unified on (1 expected), $off with off (0 expected)"
  fail=1
fi

"$export" --family llama --out "$scratch/m.gguf" >/dev/null || exit 1
if "$repro" "$scratch/m.gguf"; then
  echo "ok: the llama.h reproduction still shows the shared shift"
else
  echo "CHANGED: the llama.h reproduction no longer shows the shared shift (exit $?)"; fail=1
fi
exit $fail
