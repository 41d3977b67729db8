"""Campaigns on exec: backends, end to end through the kvcheck binary.

    exec_campaign_test.py KVCHECK WORKDIR fault KVCHECK_SERVE FAULT
        a child that exits, is killed, hangs or writes garbage once fails P1
        naming the cause, and the campaign goes on with fresh children (the
        later properties run cases). Once means never again: re-run in a
        fresh child the case passes, so no case file is written (it would
        not reproduce), and the run says so.
    exec_campaign_test.py KVCHECK WORKDIR campaign PYTHON_WITH_TORCH CASES
        the PyTorch engine passes a campaign of CASES cases a property, seed 1.
    exec_campaign_test.py KVCHECK WORKDIR trap PYTHON_WITH_TORCH TRAP
        the campaign catches the trap and writes its shrunk case file, which
        names the trap's backend; replaying it with that backend fails (exit 1).
"""

import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROXY_CAUSES = {
    "exit": "the child exited with code 3",
    "signal": "killed by signal 15",
    "hang": "no reply within 2000 ms",
    "garbage": "malformed reply: a control frame of 2147483647 bytes",
}


def run(args, timeout=600):
    print("+ " + " ".join(args), flush=True)
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def fail(message, output=""):
    sys.exit("%s\n--- output ---\n%s" % (message, output[-6000:]))


def cases_of(output, prop):
    """The cases column of PROP's row in the campaign's table."""
    m = re.search(r"^%s\s.*?\s(\d+)\s+(\d+)\s+(\d+)\s" % re.escape(prop), output, re.M)
    return int(m.group(1)) if m else -1


def fault(kvcheck, work, serve, kind):
    once = os.path.join(work, "once")
    failures = os.path.join(work, "failures")
    backend = "exec:%s %s/tests/tools/faulty_proxy.py --fault %s --at 5 --once %s -- %s%s" % (
        sys.executable, ROOT, kind, once, serve, "?timeout=2" if kind == "hang" else "")
    code, out = run([kvcheck, "campaign", "--backend", backend, "--cases", "20", "--time", "120",
                     "--seed", "1", "--failures", failures])
    if code != 1:
        fail("campaign exit %d, expected 1" % code, out)
    if PROXY_CAUSES[kind] not in out:
        fail("the report does not name the cause %r" % PROXY_CAUSES[kind], out)
    cases = glob.glob(os.path.join(failures, "*.case"))
    if cases or "no case file written, since it would not reproduce" not in out:
        fail("a failure that never recurs was written as a case file, or not said so", out)
    if cases_of(out, "P2 chunking") <= 0:
        fail("the campaign did not go on after the child's fault (P2 ran no case)", out)
    print("ok: %s -> %s, not written (it does not recur), the campaign went on (P2: %d cases)"
          % (kind, PROXY_CAUSES[kind], cases_of(out, "P2 chunking")))


def campaign(kvcheck, work, python, cases):
    # Seed 1 and a budget of cases: the same cases on every machine, so the
    # verdict depends only on the engine; --time only bounds a hung run.
    backend = "exec:%s %s/adapters/torch/engine.py" % (python, ROOT)
    code, out = run([kvcheck, "campaign", "--backend", backend, "--seed", "1", "--cases", cases,
                     "--time", "280", "--failures", os.path.join(work, "failures")])
    if code != 0:
        fail("campaign on the torch engine: exit %d, expected 0" % code, out)
    if cases_of(out, "P1 oracle") != int(cases):
        fail("P1 ran %d cases, not its budget of %s" % (cases_of(out, "P1 oracle"), cases), out)
    print(out[-2500:])


def trap(kvcheck, work, python, name):
    backend = "exec:%s %s/adapters/torch/engine.py --trap %s" % (python, ROOT, name)
    failures = os.path.join(work, "failures")
    # A case count, not only time, so that a loaded machine finds the same
    # failures (seed 1: each trap fails P1 within these 60 cases; the
    # truncate trap, which only scenarios with a truncation can show, P12).
    properties = "rollback" if name == "noop_truncate" else "oracle,reset"
    code, out = run([kvcheck, "campaign", "--backend", backend, "--time", "120", "--seed", "1",
                     "--cases", "60",
                     "--property", properties,
                     "--failures", failures])
    if code != 1:
        fail("campaign with --trap %s: exit %d, expected 1" % (name, code), out)
    cases = sorted(glob.glob(os.path.join(failures, "*.case")))
    if not cases:
        fail("no case file in " + failures, out)
    if "minimized scenario" not in out:
        fail("the failure was not shrunk", out)
    for case in cases:
        with open(case) as f:
            text = f.read()
        if "--trap " + name not in text:
            fail("%s does not name the trap's backend" % case, text)
    # One replay of them all: one child, one torch import.
    code, replayed = run([kvcheck, "replay", "--backend", backend] + cases)
    want = "replayed %d case file%s: %d failed, 0 held" % (len(cases), "" if len(cases) == 1 else "s",
                                                           len(cases))
    if code != 1 or want not in replayed:
        fail("replay with the trap: exit %d, expected 1 and %r" % (code, want), replayed)
    print("ok: --trap %s caught, %d shrunk case files, each fails on replay" % (name, len(cases)))


def main():
    kvcheck, work, mode = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if mode == "fault":
        fault(kvcheck, work, sys.argv[4], sys.argv[5])
    elif mode == "campaign":
        campaign(kvcheck, work, sys.argv[4], sys.argv[5])
    elif mode == "trap":
        trap(kvcheck, work, sys.argv[4], sys.argv[5])
    else:
        sys.exit("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
