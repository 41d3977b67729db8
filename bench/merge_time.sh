#!/bin/sh
# How long `kvcheck merge` takes over many shard reports (docs/PERFORMANCE.md,
# "Sharded campaigns"; the issue's bar: 100 reports of a 60 s campaign in
# under 2 s). Runs shard 0 of SHARDS of a SECONDS campaign (the default one:
# every property on cpu and cpu-reference, the kill matrix first), copies
# its report as every other shard's (each a report of the same size, its
# index changed), then merges them ROUNDS times and prints each wall time.
#   bench/merge_time.sh [KVCHECK] [SECONDS] [SHARDS] [ROUNDS]
# Defaults: build/release/tools/kvcheck, 60, 100, 3.
set -eu
kvcheck=${1:-build/release/tools/kvcheck}
seconds=${2:-60}
shards=${3:-100}
rounds=${4:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvcheck-merge-time-XXXXXX")
trap 'rm -rf "$work"' EXIT
status=0
"$kvcheck" campaign --seed 1 --time "$seconds" --shard-index 0 --shard-count "$shards" \
  --json "$work/shard-0.json" --failures "$work/failures" >"$work/campaign.log" 2>&1 || status=$?
tail -n 1 "$work/campaign.log"
[ "$status" -eq 0 ] || { echo "merge_time: the campaign exited $status" >&2; exit 1; }
python3 - "$work" "$shards" <<'PY'
import json, sys
work, shards = sys.argv[1], int(sys.argv[2])
with open(work + "/shard-0.json") as f:
    report = json.load(f)
for i in range(1, shards):
    report["shard"]["index"] = i
    with open("%s/shard-%d.json" % (work, i), "w") as f:
        json.dump(report, f, indent=2)
print("%d reports of %d bytes each" % (shards, len(json.dumps(report, indent=2))))
PY
i=1
while [ "$i" -le "$rounds" ]; do
  start=$(date +%s.%N)
  "$kvcheck" merge "$work" --json "$work.merged.json" --junit "$work.merged.xml" \
    --html "$work.merged.html" --failures "$work.failures" >/dev/null
  end=$(date +%s.%N)
  echo "merge of $shards reports (JSON, JUnit, HTML written), round $i: $(awk "BEGIN { printf \"%.3f\", $end - $start }") s"
  i=$((i + 1))
done
rm -rf "$work.merged.json" "$work.merged.xml" "$work.merged.html" "$work.failures"
