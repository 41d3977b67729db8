"""A cache whose length() and cache() disagree (buggy_engine.py --bug
inconsistent_length) is a
cache failure of the engine, not a malformed reply: the campaign fails P6
"the cache disagrees with itself" (exit 1) and keeps the child, so that the
shrink does not restart it at every step (before: 48 children for 20 cases
and their shrink, now one and the fresh process that confirms the case);
check-adapter calls it a cache bug, no protocol violation.

    inconsistent_cache_test.py KVCHECK WORKDIR
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    kvcheck, workdir = sys.argv[1], sys.argv[2]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    pids = os.path.join(workdir, "pids")
    backend = "exec:%s %s/buggy_engine.py --bug inconsistent_length --pids %s" % (
        sys.executable, HERE, pids)
    run = subprocess.run([kvcheck, "campaign", "--seed", "2", "--time", "120", "--cases", "20",
                          "--no-kill-matrix", "--property", "cache_state", "--backend", backend,
                          "--failures", os.path.join(workdir, "failures")],
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    problems = []
    if run.returncode != 1:
        problems.append("campaign exit %d, expected 1" % run.returncode)
    if "layer 0: the cache disagrees with itself" not in out or "malformed" in out:
        problems.append("not reported as the cache's failure")
    with open(pids) as f:
        children = len(f.read().split())
    if children > 3:
        problems.append("%d children started: the child was not kept" % children)
    check = subprocess.run([kvcheck, "check-adapter", "--backend", backend],
                           capture_output=True, text=True, timeout=300)
    if check.returncode != 1 or " 0 protocol violations" not in check.stdout or \
            "(cache()): the cache disagrees with itself" not in check.stdout:
        problems.append("check-adapter (exit %d):\n%s" % (check.returncode, check.stdout))
    if problems:
        sys.exit("inconsistent_cache_test: " + "; ".join(problems) + "\n" + out)
    print("inconsistent_cache_test: a cache failure, %d children" % children)


if __name__ == "__main__":
    main()
