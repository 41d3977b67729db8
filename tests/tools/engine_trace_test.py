"""An exec: engine's exception is shown with its place: the Python helper
sends the traceback's last frames ("trace"), kvcheck prints them with the
failure, keeps them in the case file (comment lines, never compared) and
replay prints them again.

    engine_trace_test.py KVCHECK WORKDIR
"""
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE = os.path.join(HERE, "buggy_engine.py")


def line_of(text):
    with open(ENGINE) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


def main():
    kvcheck, workdir = sys.argv[1], sys.argv[2]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    backend = "exec:%s %s --bug raise_in_step" % (sys.executable, ENGINE)
    place = "%s:%d in attend: raise ValueError(" % (ENGINE, line_of("raise ValueError"))
    caller = "%s:%d in step: return attend(entries[0][1])" % (ENGINE, line_of("return attend("))
    run = subprocess.run([kvcheck, "campaign", "--seed", "1", "--time", "60", "--cases", "5",
                          "--no-kill-matrix", "--property", "oracle", "--backend", backend,
                          "--failures", workdir], capture_output=True, text=True, timeout=300,
                         cwd=workdir)
    out = run.stdout + run.stderr
    problems = []
    if run.returncode != 1:
        problems.append("campaign exit %d, expected 1" % run.returncode)
    if "exec step: ValueError: q and k disagree: 1 tokens against a cache of 0 (internal)\n" \
            "  at " + caller + "\n  at " + place not in out:
        problems.append("the campaign does not print the engine's place")
    cases = glob.glob(os.path.join(workdir, "*.case"))
    text = open(cases[0]).read() if cases else ""
    if "# where the engine's code failed, innermost last (its traceback):\n#   " + caller + \
            "\n#   " + place not in text:
        problems.append("the case file does not keep the place:\n" + text)
    summary = [line for line in text.splitlines() if line.startswith("summary ")]
    if len(summary) != 1 or " at " in summary[0]:
        problems.append("the summary is not one line without the place: %r" % summary)
    if cases:
        replay = subprocess.run([kvcheck, "replay", "--backend", backend, cases[0]],
                                capture_output=True, text=True, timeout=120, cwd=workdir)
        if replay.returncode != 1 or place not in replay.stdout:
            problems.append("replay (exit %d) does not print the place:\n%s"
                            % (replay.returncode, replay.stdout))
    if problems:
        sys.exit("engine_trace_test: " + "; ".join(problems) + "\n" + out)
    print("engine_trace_test: the place is printed, kept and replayed")


if __name__ == "__main__":
    main()
