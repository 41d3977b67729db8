#!/usr/bin/python3
"""Every `kvcheck ...` command in the README's sh blocks runs as written, with
`kvcheck` found on PATH as the README says (`export PATH=.../build/release/tools`;
ci/example runs the installed bin/kvcheck). A README command that stops working
fails here, so the page and the program cannot drift apart.

Campaign lines run with `--cases 20 --no-kill-matrix` (and `--seed 1` where
they name no seed) appended, so that the check costs seconds, not the minute
each one asks for, and gives the same verdict on every run; every other line
runs exactly as written. Lines that name the reader's own engine or checkpoint
(PLACEHOLDERS) are skipped by name, so a new line is never skipped silently.
The file names the README uses are made here: its P6 case file is a copy of
the shared_rows regression case, and tests/ is linked from the checkout.

Usage: readme_commands_test.py README KVCHECK WORK_DIR
"""
import os
import re
import shutil
import subprocess
import sys

PLACEHOLDERS = ("my_engine.py", "./my-gpt2", "build/own-engine/",
                # a PyTorch engine: the torch label runs it (torch.learner_gpt)
                "examples/learner-gpt/")
# The exit code each command must give: 1 where the README shows a failure.
EXPECTED_EXIT = {"--fault tiled_kv_heads": 1, "kvcheck replay kvcheck-failures": 1}


def readme_commands(readme):
    commands, in_sh = [], False
    for line in open(readme, encoding="utf-8"):
        stripped = line.strip()
        if stripped.startswith("```"):
            in_sh = stripped == "```sh"
            continue
        if in_sh and stripped.startswith("kvcheck "):
            commands.append(re.sub(r"\s+#.*$", "", stripped))
    return commands


def prepare(work, repo):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "kvcheck-failures"))
    os.symlink(os.path.join(repo, "tests"), os.path.join(work, "tests"))
    shutil.copy(os.path.join(repo, "corpus/regressions/shared_rows.cache_state.case"),
                os.path.join(work, "kvcheck-failures/P6-cache_state-shared_rows-1a2b3c4d.case"))


def main():
    readme, kvcheck, work = sys.argv[1:4]
    repo = os.path.dirname(os.path.abspath(readme))
    prepare(work, repo)
    env = dict(os.environ, PATH=os.path.dirname(os.path.abspath(kvcheck)) + ":" + os.environ["PATH"])
    commands = readme_commands(readme)
    if len(commands) < 8:
        sys.exit(f"found only {len(commands)} kvcheck commands in {readme}: is the parser stale?")
    failures, ran = [], 0
    for command in commands:
        if any(p in command for p in PLACEHOLDERS):
            print(f"skipped (the reader's own engine or checkpoint): {command}")
            continue
        run = command
        if command.startswith("kvcheck campaign ") and "--help" not in command:
            run += " --cases 20 --no-kill-matrix" + ("" if "--seed" in command else " --seed 1")
        want = next((code for key, code in EXPECTED_EXIT.items() if key in command), 0)
        result = subprocess.run(["bash", "-c", run], cwd=work, env=env, capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, timeout=300)
        ran += 1
        verdict = "ok" if result.returncode == want else "FAILED"
        print(f"{verdict}: exit {result.returncode} (want {want}): {run}")
        if result.returncode != want:
            failures.append(run)
            print((result.stdout + result.stderr)[-2000:])
    print(f"{ran} README commands ran, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
