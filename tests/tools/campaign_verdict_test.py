#!/usr/bin/env python3
"""A campaign's verdict depends only on the engine, and nothing is lost.

    campaign_verdict_test.py KVCHECK WORKDIR crash CRASH_PLUGIN KVCHECK_SERVE
    campaign_verdict_test.py KVCHECK WORKDIR interrupt KVCHECK_SERVE
    campaign_verdict_test.py KVCHECK WORKDIR reproduce
    campaign_verdict_test.py KVCHECK WORKDIR not_run

crash: an engine that segfaults, aborts or hangs (the in-tree engine under
freed_block_still_referenced, which once wrote out of bounds; a test plugin;
an exec adapter) fails with exit 1, a case file and every report asked for,
never a signal.
interrupt: SIGINT or SIGTERM mid-run exits 130 or 143 with every report
written and marked interrupted, and the exec scratch folder removed.
reproduce: the printed `reproduce:` line of a campaign with --cases,
--turn-cases, --property and --no-kill-matrix prints the same table.
not_run: a property that can never apply to a backend is not run and is
reported as not run (console, JSON, JUnit), never as held.
"""
import glob
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROW = re.compile(r"^P\d+ \w+\s+\S+\s+\d+\s+\d+\s+\d+\s+\d+\s+\S+\s+")


def fail(message, output=""):
    sys.exit("FAIL: " + message + ("\n--- output ---\n" + output[-6000:] if output else ""))


def reports(work, tag):
    return {kind: os.path.join(work, "%s.%s" % (tag, ext))
            for kind, ext in (("json", "json"), ("junit", "xml"), ("html", "html"))}


def report_args(paths):
    return ["--json", paths["json"], "--junit", paths["junit"], "--html", paths["html"]]


def run_campaign(kvcheck, work, tag, args, timeout=300):
    paths = reports(work, tag)
    failures = os.path.join(work, tag + "-failures")
    cmd = [kvcheck, "campaign", "--failures", failures] + report_args(paths) + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p, paths, failures


def expect_failed_with_reports(p, paths, failures, tag, needle):
    out = p.stdout + p.stderr
    if p.returncode != 1:
        fail("%s: exit %d, expected 1 (a failure, not a signal)" % (tag, p.returncode), out)
    for kind, path in paths.items():
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            fail("%s: no %s report at %s" % (tag, kind, path), out)
    with open(paths["json"]) as f:
        summary = json.load(f)
    if summary["status"] != "failed" or summary["exit_code"] != 1:
        fail("%s: JSON says %s / %s" % (tag, summary["status"], summary["exit_code"]), out)
    ET.parse(paths["junit"])
    cases = glob.glob(os.path.join(failures, "*.case"))
    if not cases:
        fail("%s: no case file written" % tag, out)
    failed = [t for t in summary["properties"] if t["failed"]]
    if not any(needle in t["failure"] for t in failed):
        fail("%s: no failure mentions %r: %s" % (tag, needle, [t["failure"] for t in failed]), out)
    print("%s: exit 1, %d case files, every report written" % (tag, len(cases)))


def replay_and_shrink_a_crash(kvcheck, failures, backend, tag):
    """A crash's case replays with the verdict recorded, and shrinks: each
    check runs in a process of its own, so kvcheck survives it."""
    case = sorted(glob.glob(os.path.join(failures, "*.case")))[0]
    r = subprocess.run([kvcheck, "replay", "--backend", backend, case], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 1 or "the same verdict as recorded" not in r.stdout:
        fail("%s: replay exit %d" % (tag, r.returncode), r.stdout + r.stderr)
    s = subprocess.run([kvcheck, "shrink", "--backend", backend, case], capture_output=True,
                       text=True, timeout=120)
    if s.returncode != 0 or "crashed" not in s.stdout:
        fail("%s: shrink exit %d" % (tag, s.returncode), s.stdout + s.stderr)


def crash(kvcheck, work, plugin, serve):
    p, paths, failures = run_campaign(kvcheck, work, "freed_block", [
        "--fault", "freed_block_still_referenced", "--seed", "5", "--cases", "100", "--time", "280"])
    expect_failed_with_reports(p, paths, failures, "freed_block", "")
    for how, needle, extra in (("segv", "crashed", []), ("abort", "crashed", []),
                               ("hang", "a hang", ["--case-timeout", "0.5",
                                                   "--shrink-steps", "3"])):
        backend = "plugin:%s?crash=%s" % (plugin, how)
        p, paths, failures = run_campaign(kvcheck, work, "plugin_" + how, [
            "--backend", backend, "--property", "oracle", "--time", "60", "--seed", "1"] + extra)
        expect_failed_with_reports(p, paths, failures, "plugin_" + how, needle)
        if how != "hang":
            replay_and_shrink_a_crash(kvcheck, failures, backend, "plugin_" + how)
    proxy = "%s %s/tests/tools/faulty_proxy.py --at 3 --fault" % (sys.executable, ROOT)
    for how, needle, option in (("segv", "signal 11", ""), ("abort", "signal 6", ""),
                                ("hang", "", "?timeout=1")):
        p, paths, failures = run_campaign(kvcheck, work, "exec_" + how, [
            "--backend", "exec:%s %s -- %s%s" % (proxy, how, serve, option), "--property",
            "oracle", "--time", "60", "--seed", "1", "--shrink-steps", "3"])
        expect_failed_with_reports(p, paths, failures, "exec_" + how, needle)


def interrupt(kvcheck, work, serve):
    # SIGINT while the kill matrix runs, SIGTERM while the properties do.
    for sig, code, phase in ((signal.SIGINT, 130, []), (signal.SIGTERM, 143, ["--no-kill-matrix"])):
        tag = "interrupt_%d" % code
        paths = reports(work, tag)
        cmd = [kvcheck, "campaign", "--time", "120", "--seed", "3", "--backend", "cpu",
               "--backend", "exec:" + serve] + phase + report_args(paths)
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env=dict(os.environ, TMPDIR=""))
        # The exec backend's scratch folder exists once the properties run.
        pattern = "/dev/shm/kvcheck-exec-%d-*" % child.pid
        deadline = time.time() + 60
        while not glob.glob(pattern) and time.time() < deadline and child.poll() is None:
            time.sleep(0.1)
        time.sleep(1)
        if child.poll() is not None:
            fail("%s: the campaign ended before the signal" % tag, child.stdout.read())
        child.send_signal(sig)
        try:
            out, _ = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            child.kill()
            fail("%s: still running 60 s after the signal" % tag)
        if child.returncode != code:
            fail("%s: exit %d, expected %d" % (tag, child.returncode, code), out)
        with open(paths["json"]) as f:
            summary = json.load(f)
        if summary["status"] != "interrupted" or not summary["interrupted"]:
            fail("%s: JSON status %s" % (tag, summary["status"]), out)
        if summary["exit_code"] != code:
            fail("%s: JSON exit_code %s" % (tag, summary["exit_code"]), out)
        if "INTERRUPTED" not in open(paths["html"]).read():
            fail("%s: the HTML report does not say interrupted" % tag, out)
        ET.parse(paths["junit"])
        if glob.glob(pattern):
            fail("%s: scratch left behind: %s" % (tag, glob.glob(pattern)), out)
        print("%s: exit %d, reports marked interrupted, no scratch left" % (tag, code))


def table(output):
    return [line for line in output.splitlines() if ROW.match(line)]


def reproduce(kvcheck, work):
    args = ["--seed", "11", "--cases", "40", "--turn-cases", "7", "--property",
            "oracle,chunking,pool", "--no-kill-matrix", "--backend", "cpu", "--time", "300"]
    first = subprocess.run([kvcheck, "campaign"] + args, capture_output=True, text=True,
                           timeout=300)
    line = re.search(r"^reproduce: kvcheck (.*)$", first.stdout, re.M)
    if first.returncode != 0 or not line:
        fail("reproduce: first run exit %d" % first.returncode, first.stdout + first.stderr)
    again = subprocess.run([kvcheck] + shlex.split(line.group(1)), capture_output=True,
                           text=True, timeout=300)
    if table(first.stdout) != table(again.stdout) or not table(first.stdout):
        fail("reproduce: the tables differ\n" + "\n".join(table(first.stdout)) + "\n---\n" +
             "\n".join(table(again.stdout)))
    # The same cases of one property alone: turn seeds belong to the pair.
    alone = subprocess.run([kvcheck, "campaign", "--seed", "11", "--cases", "40",
                            "--turn-cases", "7", "--property", "chunking", "--no-kill-matrix",
                            "--backend", "cpu"], capture_output=True, text=True, timeout=300)
    if [r for r in table(first.stdout) if r.startswith("P2 ")] != table(alone.stdout):
        fail("reproduce: --property chunking alone drew other cases",
             "\n".join(table(first.stdout)) + "\n---\n" + alone.stdout)
    print("reproduce: %s gives the same %d rows" % (line.group(1), len(table(first.stdout))))


def not_run(kvcheck, work):
    # profile=restricted declares no cache snapshots and no capacity refusal:
    # P6 and P9 can never apply; P10 has no reference.
    p, paths, _ = run_campaign(kvcheck, work, "not_run", [
        "--backend", "cpu?profile=restricted", "--cases", "30", "--no-kill-matrix",
        "--seed", "2", "--time", "120"])
    if p.returncode != 0:
        fail("not_run: exit %d" % p.returncode, p.stdout + p.stderr)
    with open(paths["json"]) as f:
        rows = {t["property"]: t for t in json.load(f)["properties"]}
    for name, why in (("cache_state", "cache snapshots"), ("capacity", "a capacity refusal"),
                      ("cross_engine", "no reference engine")):
        t = rows[name]
        if t["cases"] != 0 or t["passed"] != 0 or not t["not_run"] or why not in t["not_run"]:
            fail("not_run: %s: %s" % (name, t), p.stdout)
        line = next(l for l in table(p.stdout) if re.match(r"P\d+ %s " % name, l))
        if "not run: " not in line:
            fail("not_run: console row of %s: %s" % (name, line), p.stdout)
    skipped = {c.get("name").split(" ", 1)[1] for c in ET.parse(paths["junit"]).iter("testcase")
               if c.find("skipped") is not None}
    if not {"cache_state", "capacity", "cross_engine"} <= skipped:
        fail("not_run: JUnit skips only %s" % sorted(skipped))
    held = rows["oracle"]
    if held["passed"] != held["applied"] or held["cases"] != 30:
        fail("not_run: oracle counts %s" % held)
    # Every checked P1 case sits in one bucket below the bound, none at 1 or past.
    buckets = held["error_over_bound_histogram"]
    if len(buckets) != 16 or sum(buckets) != held["applied"] or buckets[15] != 0:
        fail("not_run: oracle's error_over_bound_histogram %s for %d cases" % (buckets, held["applied"]))
    print("not_run: P6, P9 and P10 not run, with their reasons")


def main():
    kvcheck, work, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    if mode == "crash":
        crash(kvcheck, work, sys.argv[4], sys.argv[5])
    elif mode == "interrupt":
        interrupt(kvcheck, work, sys.argv[4])
    elif mode == "reproduce":
        reproduce(kvcheck, work)
    elif mode == "not_run":
        not_run(kvcheck, work)
    else:
        fail("unknown mode " + mode)


if __name__ == "__main__":
    main()
