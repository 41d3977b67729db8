#!/bin/bash
# Queues a sharded kvcheck campaign on Slurm: the array of shards, then the
# merge once every task has ended (docs/DISTRIBUTED.md).
#   examples/distributed/slurm-submit.sh [SEED]   (default: the time now)
set -euo pipefail
here=$(dirname "$0")
export KVCHECK_SEED=${1:-$(date +%s)}
export KVCHECK_RESULTS=$PWD/kvcheck-results/$KVCHECK_SEED
shards=$(sbatch --parsable --export=ALL "$here/slurm-shards.sbatch")
sbatch --dependency=afterany:"$shards" --export=ALL "$here/slurm-merge.sbatch"
echo "kvcheck: shards in job $shards; reports in $KVCHECK_RESULTS"
