#!/usr/bin/env python3
"""A campaign's shards, merged, are one run (docs/DISTRIBUTED.md).

    distributed_test.py KVCHECK WORKDIR correct|fault|killed

correct: on the correct engine, N = 1, 2 and 4 shards (N processes at once)
merged by `kvcheck merge` give one unsharded run's tallies and case digest,
case for case, and so do 3 shards with --scenarios-per-model 3; reports of another build, seed or --cases are refused (exit
2) naming the difference; a missing shard makes the merge incomplete (4).
fault: under --fault shared_rows, 4 shards merged fail (exit 1) every pair
the one run fails, at the same first failing turn with the same verdict and
the same shrunk case, gathered into one folder.
killed: a shard killed (SIGKILL) halfway leaves a checkpoint that the merge
lists as killed (exit 4, a JUnit error); run again it continues from its
report, and the merge then equals the one run.

Every budget is in cases (--cases), so no verdict depends on wall time. The
shard variables of the test's own environment are removed.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

SHARD_VARIABLES = ["GTEST_SHARD_INDEX", "GTEST_TOTAL_SHARDS", "JOB_COMPLETION_INDEX",
                   "KVCHECK_SHARD_COUNT", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT",
                   "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP"]
ENV = {k: v for k, v in os.environ.items() if k not in SHARD_VARIABLES}


def fail(message, output=""):
    sys.exit("FAIL: " + message + ("\n--- output ---\n" + output[-6000:] if output else ""))


def campaign_args(work, tag, args):
    return ["campaign", "--json", os.path.join(work, tag + ".json"),
            "--failures", os.path.join(work, tag + "-failures")] + args


def run(kvcheck, args, expect, env=ENV):
    p = subprocess.run([kvcheck] + args, capture_output=True, text=True, timeout=240, env=env)
    if p.returncode != expect:
        fail("`kvcheck %s` exited %d, expected %d" % (" ".join(args), p.returncode, expect),
             p.stdout + p.stderr)
    return p.stdout


def shards(kvcheck, work, tag, args, count, expect, indices=None):
    """Runs shards `indices` (all) of `count` at once, each exiting with a code
    in `expect`; returns their report paths."""
    procs = []
    for i in range(count) if indices is None else indices:
        a = campaign_args(work, "%s-%dof%d" % (tag, i, count), args) + [
            "--shard-index", str(i), "--shard-count", str(count)]
        procs.append((a, subprocess.Popen([kvcheck] + a, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, env=ENV)))
    paths = []
    for a, p in procs:
        out = p.communicate(timeout=240)[0]
        if p.returncode not in expect:
            fail("shard `%s` exited %d, expected %s" % (" ".join(a), p.returncode, expect), out)
        paths.append(a[a.index("--json") + 1])
    return paths


def load(path):
    with open(path) as f:
        return json.load(f)


def merge(kvcheck, work, tag, reports, expect):
    out = os.path.join(work, tag + "-merged")
    stdout = run(kvcheck, ["merge"] + reports + ["--json", out + ".json", "--junit", out + ".xml",
                                                 "--html", out + ".html", "--failures",
                                                 out + "-failures"], expect)
    ET.parse(out + ".xml")
    with open(out + ".html") as f:
        if "<h3>Shards</h3>" not in f.read():
            fail("the merged HTML report lists no shards")
    return load(out + ".json"), stdout, out


def same_cases(one, merged, what):
    if merged["case_digest"] != one["case_digest"]:
        fail("%s: case digest %s, one run's %s" % (what, merged["case_digest"],
                                                  one["case_digest"]))
    for a, b in zip(one["properties"], merged["properties"]):
        for key in ("property", "backend", "cases", "passed", "not_applicable", "case_digest",
                    "coverage", "proof_of_use", "error_over_bound_histogram"):
            if a[key] != b[key]:
                fail("%s: %s on %s: %s %r, one run's %r" % (what, a["property"], a["backend"], key,
                                                            b[key], a[key]))
        if abs(a["worst_error_over_bound"] - b["worst_error_over_bound"]) > 0:
            fail("%s: %s worst ratio differs" % (what, a["property"]))


CORRECT = ["--seed", "7", "--time", "600", "--cases", "40", "--turn-cases", "10",
           "--backend", "cpu", "--property", "P1,P2,P6,P11,P12,P15", "--no-kill-matrix"]


def correct(kvcheck, work):
    run(kvcheck, campaign_args(work, "one", CORRECT), 0)
    one = load(os.path.join(work, "one.json"))
    if one["shard"]["count"] != 1 or one["shard"]["source"] is not None:
        fail("an unsharded run's shard: %r" % one["shard"])
    for count in (1, 2, 4):
        reports = shards(kvcheck, work, "correct", CORRECT, count, (0,))
        merged, _, _ = merge(kvcheck, work, "correct-%d" % count, reports, 0)
        same_cases(one, merged, "%d shards" % count)
        print("%d shard(s): digest %s, %d cases, as one run" % (
            count, merged["case_digest"], sum(t["cases"] for t in merged["properties"])))
    # Several scenarios per model: model k of a pair's stream is the same
    # whichever shard draws it.
    reuse = CORRECT + ["--scenarios-per-model", "3"]
    run(kvcheck, campaign_args(work, "reuse-one", reuse), 0)
    merged, _, _ = merge(kvcheck, work, "reuse", shards(kvcheck, work, "reuse", reuse, 3, (0,)), 0)
    same_cases(load(os.path.join(work, "reuse-one.json")), merged, "--scenarios-per-model 3")
    print("--scenarios-per-model 3, 3 shards: digest %s, as one run" % merged["case_digest"])
    four = [os.path.join(work, "correct-%dof4.json" % i) for i in range(4)]
    _, stdout, _ = merge(kvcheck, work, "missing", four[:3], 4)
    if "shard 3 of 4: no report (missing)" not in stdout:
        fail("a missing shard is not listed", stdout)
    refusals(kvcheck, work, four)


def refusals(kvcheck, work, four):
    def edited(name, change):
        report = load(four[1])
        change(report)
        path = os.path.join(work, name + ".json")
        with open(path, "w") as f:
            json.dump(report, f)
        return path
    other_build = edited("other-build", lambda r: r["kvcheck"].update(commit="0123456"))
    other_seed = edited("other-seed", lambda r: r.update(seed=8))
    p = subprocess.run([kvcheck, "merge", four[0], other_build], capture_output=True, text=True,
                       env=ENV)
    if p.returncode != 2 or "the kvcheck build" not in p.stderr:
        fail("reports of two builds: exit %d" % p.returncode, p.stderr)
    p = subprocess.run([kvcheck, "merge", four[0], other_seed], capture_output=True, text=True,
                       env=ENV)
    if p.returncode != 2 or "--seed: 7 in" not in p.stderr:
        fail("reports of two seeds: exit %d" % p.returncode, p.stderr)
    other = CORRECT[:]
    other[other.index("--cases") + 1] = "30"
    run(kvcheck, campaign_args(work, "other-cases", other + ["--shard-index", "1",
                                                             "--shard-count", "4"]), 0)
    p = subprocess.run([kvcheck, "merge", four[0], os.path.join(work, "other-cases.json")],
                       capture_output=True, text=True, env=ENV)
    if p.returncode != 2 or "--cases: 40 in" not in p.stderr:
        fail("reports of two --cases: exit %d" % p.returncode, p.stderr)
    print("refused: another build, another seed, another --cases (exit 2, named)")


FAULT = ["--seed", "3", "--time", "600", "--cases", "40", "--turn-cases", "10", "--backend", "cpu",
         "--property", "P1,P2,P6,P8,P11", "--fault", "shared_rows"]


def fault(kvcheck, work):
    run(kvcheck, campaign_args(work, "fone", FAULT), 1)
    one = load(os.path.join(work, "fone.json"))
    # A shard fails (1) where its own turns catch the fault, passes (0) where none does.
    reports = shards(kvcheck, work, "fault", FAULT, 4, (0, 1))
    merged, _, out = merge(kvcheck, work, "fault", reports, 1)
    failed = 0
    for a, b in zip(one["properties"], merged["properties"]):
        for key in ("failed", "failure", "first_failing_turn"):
            if a[key] != b[key]:
                fail("%s: %s %r, one run's %r" % (a["property"], key, b[key], a[key]))
        if not a["failed"]:
            continue
        failed += 1
        first = [f for f in one["failures"] if f["property"] == a["property"]][0]
        found = [f for f in merged["failures"]
                 if f["property"] == a["property"] and f["turn"] == a["first_failing_turn"]]
        if not found or found[0]["case_hash"] != first["case_hash"]:
            fail("%s: the merged failure of turn %s is another case" % (a["property"],
                                                                     a["first_failing_turn"]))
        if not os.path.isfile(found[0]["case_file"]) or \
                not found[0]["case_file"].startswith(out + "-failures"):
            fail("%s: its case file %s is not gathered" % (a["property"], found[0]["case_file"]))
    if failed == 0:
        fail("the fault failed no property: the test checks nothing")
    hashes = [f["case_hash"] for f in merged["failures"]]
    if len(hashes) != len(set(hashes)):
        fail("the merged failures repeat a case")
    print("fault: %d pairs failed at the one run's turns with its cases; %d distinct failures"
          % (failed, len(hashes)))


KILLED = ["--seed", "5", "--time", "600", "--cases", "600", "--turn-cases", "5",
          "--backend", "cpu", "--property", "P1", "--no-kill-matrix"]


def killed(kvcheck, work):
    run(kvcheck, campaign_args(work, "kone", KILLED), 0)
    one = load(os.path.join(work, "kone.json"))
    s1 = shards(kvcheck, work, "killed", KILLED, 2, (0,), indices=[1])
    args = campaign_args(work, "k0", KILLED + ["--shard-index", "0", "--shard-count", "2"])
    env = dict(ENV, KVCHECK_CHECKPOINT_SECONDS="0")  # a checkpoint after every turn
    p = subprocess.Popen([kvcheck] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env)
    report = os.path.join(work, "k0.json")
    turns, deadline = 0, time.time() + 120
    while turns < 3 and time.time() < deadline and p.poll() is None:
        time.sleep(0.02)
        try:
            turns = sum(t["turns"] for t in load(report)["properties"])
        except (OSError, ValueError, KeyError):
            pass
    p.send_signal(signal.SIGKILL)
    p.wait()
    left = load(report)
    # Shard 0 of 2 runs 60 of the 120 turns: killed halfway, not at the end.
    if left["status"] != "running" or not 3 <= sum(t["turns"] for t in left["properties"]) < 60:
        fail("the killed shard left %s after %d turns" % (
            left["status"], sum(t["turns"] for t in left["properties"])))
    merged, stdout, out = merge(kvcheck, work, "killed", [report] + s1, 4)
    if merged["shards"][0]["status"] != "killed" or "killed after" not in stdout:
        fail("the killed shard is not listed as killed", stdout)
    if ET.parse(out + ".xml").getroot().get("errors") != "1":
        fail("the merged JUnit shows no error for the killed shard")
    again = run(kvcheck, args, 0, env=env)
    if "continuing from " + report not in again:
        fail("the shard run again did not continue", again)
    merged, _, _ = merge(kvcheck, work, "continued", [report] + s1, 0)
    same_cases(one, merged, "a killed shard, continued")
    print("killed after %d turns: merged incomplete (exit 4); continued, the merge is one run" %
          sum(t["turns"] for t in left["properties"]))


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("correct", "fault", "killed"):
        sys.exit(__doc__)
    kvcheck, work, mode = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    {"correct": correct, "fault": fault, "killed": killed}[mode](kvcheck, work)


if __name__ == "__main__":
    main()
