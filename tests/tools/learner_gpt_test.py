"""examples/learner-gpt: the lesson-shaped PyTorch GPT through exec: and the
Python helper, end to end (label torch, a short budget):
  - check-adapter is clean, and skips the shapes its traits exclude;
  - with --no-shape-limits it names each shape the model cannot load, with
    the limit to declare and the place in the engine's code;
  - a campaign passes (P7 not run: MHA only);
  - --bug mask_from_zero fails P1 with a case file, and replay with the
    --backend the case file's header names fails too;
  - with --model, a fixed Hugging Face GPT-2 checkpoint (the hf_checkpoints
    fixture), P1 and P6 pass.

    learner_gpt_test.py KVCHECK PYTHON_WITH_TORCH WORKDIR [CHECKPOINT]
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
problems = []


def kvcheck(*args, code):
    run = subprocess.run([KVCHECK] + list(args), capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    if run.returncode != code:
        problems.append("kvcheck %s: exit %d, expected %d\n%s"
                        % (" ".join(args[:3]), run.returncode, code, out[-3000:]))
    return out


def expect(what, out, *words):
    for w in words:
        if w not in out:
            problems.append("%s: no %r in the output" % (what, w))


def main():
    global KVCHECK
    KVCHECK, python, workdir = sys.argv[1:4]
    checkpoint = sys.argv[4] if len(sys.argv) > 4 else ""
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    engine = "exec:%s %s/examples/learner-gpt/engine.py" % (python, ROOT)
    out = kvcheck("check-adapter", "--backend", engine, code=0)
    expect("check-adapter", out, "0 protocol violations, 0 cache bugs, 0 refused shapes",
           "skip gpt2 GQA (", "skip llama shapes: the traits exclude the family")
    out = kvcheck("check-adapter", "--backend", engine + " --no-shape-limits", code=1)
    expect("check-adapter --no-shape-limits", out,
           "SHAPE REFUSED       gpt2 MQA (4 heads of 8 over 1 KV head, d_model 32, d_ff 128): "
           "the traits allow it; declare limits.mha_only",
           "declare limits.d_ff_is_4x_d_model [\"gpt2\"]",
           "declare limits.query_width_is_d_model [\"gpt2\"]", "in build: ")
    out = kvcheck("campaign", "--seed", "3", "--time", "300", "--cases", "15", "--no-kill-matrix",
                  "--backend", engine, "--failures", os.path.join(workdir, "clean"), code=0)
    expect("campaign", out, "not run: the engine takes MHA models only (limits.mha_only)")
    failures = os.path.join(workdir, "bug")
    out = kvcheck("campaign", "--seed", "3", "--time", "300", "--cases", "30", "--no-kill-matrix",
                  "--property", "oracle", "--backend", engine + " --bug mask_from_zero",
                  "--failures", failures, code=1)
    cases = sorted(os.listdir(failures)) if os.path.isdir(failures) else []
    if not cases:
        problems.append("--bug mask_from_zero wrote no case file")
    else:
        with open(os.path.join(failures, cases[0])) as f:
            header = f.read().splitlines()[1]
        backend = re.search(r"--backend '([^']*)'", header)
        if not backend:
            problems.append("the case file's header names no --backend: " + header)
        else:
            kvcheck("replay", "--backend", backend.group(1), os.path.join(failures, cases[0]),
                    code=1)
    if checkpoint and os.path.isdir(checkpoint):
        out = kvcheck("campaign", "--seed", "3", "--time", "300", "--cases", "10",
                      "--no-kill-matrix", "--property", "oracle,cache_state", "--backend", engine,
                      "--model", checkpoint, "--failures", os.path.join(workdir, "model"), code=0)
        expect("campaign --model", out, "generators vary schedules and tokens only")
    for p in problems:
        print("FAIL:", p)
    print("learner_gpt:", "FAILED" if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
