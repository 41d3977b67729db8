#!/bin/sh
# The ctests of an engine served by a Node adapter (labels llama.cpp,
# onnxruntime): a campaign against the adapter that must pass, and the replay
# of one corpus case file.
#   run_engine.sh ADAPTER PACKAGE campaign KVCHECK EXPORT CASES
#   run_engine.sh ADAPTER PACKAGE replay KVCHECK EXPORT CASE_FILE
#   run_engine.sh ADAPTER PACKAGE check KVCHECK EXPORT "ADAPTER OPTIONS"
#                 (kvcheck check-adapter on the adapter with those options)
#   run_engine.sh ADAPTER PACKAGE reference KVCHECK EXPORT CASE_FILE
#                 (a P10 case with the sides swapped: the in-tree cpu engine
#                 under test, the adapter in the case's mode its reference;
#                 must pass)
# ADAPTER is the adapter's folder (adapters/llama.cpp), PACKAGE the npm
# package its node_modules must hold (node-llama-cpp). EXPORT is only probed
# here (does it write ONNX?): the adapter converts with the kvcheck-export
# that kvcheck names in its environment (KVCHECK_EXPORT, the one beside
# kvcheck), so no --export is passed and an inherited KVCHECK_EXPORT is unset.
# Skips (exit 77) with a message where Node 20+ or the adapter's node_modules
# is missing (a developer who skipped npm); ci/setup installs them in CI.
# A case file's backend is its first "# expect:" line's mode; the file name
# says what it must do: NAME.fails.case still fails on the engine (a finding
# that is not fixed; if it passes, the engine changed: update the finding),
# NAME.holds.case must pass.
set -u
adapter=$1 package=$2
shift 2
mode=$1 kvcheck=$2 export=$3 arg=$4
unset KVCHECK_EXPORT
engine=$(basename "$adapter")
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null) || major=0
if [ "${major:-0}" -lt 20 ]; then
  echo "SKIPPED: Node 20 or newer is not on PATH (ci/setup says how to install it)"
  exit 77
fi
if [ ! -d "$adapter/node_modules/$package" ]; then
  echo "SKIPPED: $adapter/node_modules is missing: run (cd $adapter && npm ci --omit=optional --ignore-scripts)"
  exit 77
fi
# ONNX Runtime reads the ONNX graphs of kvcheck-export, which only a build
# with ONNX's schema (libonnx-dev, libprotobuf-dev) writes.
if [ "$engine" = onnxruntime ]; then
  probe=${TMPDIR:-/tmp}/kvcheck-onnx-probe-$$.onnx
  if ! "$export" --family llama --head-dim 16 --out "$probe" >/dev/null 2>&1; then
    echo "SKIPPED: $export writes no ONNX (built without libonnx-dev and libprotobuf-dev; ci/setup installs them)"
    exit 77
  fi
  rm -f "$probe"
fi
case $mode in
  campaign)
    # The adapter's default mode (llama.cpp: f32 K/V, flash attention off),
    # the one whose traits kvcheck checks in full. Three cases per property
    # per turn: at about 1 case/s every property gets turns within the time
    # (the default 25 would leave most at 0).
    # llama.cpp: ten scenarios per generated model: loads were most of a case
    # (docs/PERFORMANCE.md); more models than a new one per case drew in a
    # minute.
    # And P10 against the in-tree cpu engine (B + B_ref, each side's own
    # arithmetic; docs/LLAMA_CPP.md, "P10 against the in-tree engine").
    llama_options=
    if [ "$engine" = llama.cpp ]; then llama_options="--scenarios-per-model 10 --reference cpu"; fi
    # shellcheck disable=SC2086  # llama_options: none or four words
    # A budget in cases on a fixed seed, so the test checks the same cases
    # on a fast machine and a slow one; --time only bounds a hung run (a cut
    # run exits 4, incomplete, and fails the test).
    exec "$kvcheck" campaign --backend "exec:node $adapter/engine.mjs" \
      --cases "$arg" --seed 1 --time 540 --turn-cases 3 $llama_options --no-kill-matrix \
      --failures "${TMPDIR:-/tmp}/kvcheck-$engine-ci-failures"
    ;;
  check)
    exec "$kvcheck" check-adapter --backend "exec:node $adapter/engine.mjs $arg"
    ;;
  replay | reference)
    # The adapter options the case was found with, from its "backend" line.
    options=$(sed -n 's/^backend exec:node [^ ]*engine\.mjs\( .*\)\{0,1\}$/\1/p' "$arg" | head -n 1 |
      sed 's/ --export [^ ]*//')
    if [ "$mode" = reference ]; then
      exec "$kvcheck" replay "$arg" --backend cpu --reference "exec:node $adapter/engine.mjs$options"
    fi
    "$kvcheck" replay "$arg" --backend "exec:node $adapter/engine.mjs$options"
    status=$?
    case $arg in
      *.fails.case)
        if [ $status -eq 1 ]; then
          echo "ok: still fails on $engine, as recorded (the finding is not fixed upstream)"
          exit 0
        fi
        echo "CHANGED: $arg no longer fails (exit $status): $engine's behaviour changed; update the finding and the corpus"
        exit 1
        ;;
      *) exit $status ;;
    esac
    ;;
  *)
    echo "run_engine.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
