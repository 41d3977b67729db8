#!/usr/bin/env python3
"""Cases a campaign runs in the same wall time as one process and as two
shards side by side (docs/PERFORMANCE.md, "Sharded campaigns"; the issue's
bar: 2 shards on 2 cores give at least 1.8x the cases of one process).

    bench/shard_scaling.py [KVCHECK] [SECONDS] [ROUNDS]

Defaults: build/release/tools/kvcheck, 20, 3. Alternates the two, ROUNDS
times, SECONDS each, on the in-tree engines without the kill matrix, and
prints per round the cases, the ratio, the CPU seconds the campaigns took
(worker processes included) and the load average before it. On a shared
machine the wall-time ratio follows the other users' load, not kvcheck;
cases per CPU second then say whether two shards slow each other down
(cache, memory bandwidth) where the machine cannot show the wall-time
scaling itself.
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def campaigns(kvcheck, seconds, work, shards):
    """Runs `shards` campaigns at once (1: unsharded); returns (cases, CPU s)."""
    cpu, procs, paths = children_cpu(), [], []
    for i in range(shards):
        path = os.path.join(work, "shard-%d.json" % i)
        flags = [] if shards == 1 else ["--shard-index", str(i), "--shard-count", str(shards)]
        procs.append(subprocess.Popen(
            [kvcheck, "campaign", "--seed", "1", "--time", str(seconds), "--no-kill-matrix",
             "--json", path, "--failures", os.path.join(work, "failures")] + flags,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        paths.append(path)
    for p in procs:
        if p.wait() != 0:
            sys.exit("shard_scaling: a campaign exited %d" % p.returncode)
    cases = 0
    for path in paths:
        with open(path) as f:
            cases += sum(t["cases"] for t in json.load(f)["properties"])
    return cases, children_cpu() - cpu


def main():
    kvcheck = sys.argv[1] if len(sys.argv) > 1 else "build/release/tools/kvcheck"
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    with tempfile.TemporaryDirectory(prefix="kvcheck-shard-scaling-") as work:
        for r in range(1, rounds + 1):
            load = os.getloadavg()[0]
            start = time.time()
            one, one_cpu = campaigns(kvcheck, seconds, work, 1)
            two, two_cpu = campaigns(kvcheck, seconds, work, 2)
            print("round %d (load %.2f before it, %.0f s): one process %d cases in %.1f CPU-s "
                  "(%.0f/CPU-s), two shards %d cases in %.1f CPU-s (%.0f/CPU-s): ratio %.2f" %
                  (r, load, time.time() - start, one, one_cpu, one / one_cpu, two, two_cpu,
                   two / two_cpu, two / one), flush=True)


if __name__ == "__main__":
    main()
