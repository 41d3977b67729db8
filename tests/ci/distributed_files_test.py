#!/usr/bin/env python3
"""The ready-to-use files of docs/DISTRIBUTED.md parse and hold what their
schedulers require (examples/distributed/).

    distributed_files_test.py SOURCE_DIR

GitHub Actions: `on`, a shard job with a matrix of shards 0..N-1 that runs
`kvcheck campaign` with the matrix's index and the job total and uploads
its report whatever happened; a merge job that needs it, runs always,
downloads the artifacts, runs `kvcheck merge` and publishes the JUnit and
HTML. Kubernetes: a ReadWriteMany claim, an Indexed Job (completionMode,
completions = --shard-count, restartPolicy Never, a failure policy that
ends an index on a verdict) and a merge Job on the same claim. Slurm: an
array 0..N-1 (or 1..N) whose tasks run `kvcheck campaign` without shard
flags, and a merge queued after it. Every command is kvcheck's own.
Uses python3-yaml (ci/setup installs it).
"""
import os
import re
import sys

import yaml


def fail(message):
    sys.exit("FAIL: " + message)


def need(condition, message):
    if not condition:
        fail(message)


def steps_text(job):
    return "\n".join(str(s.get("run", "")) + " " + str(s.get("uses", "")) for s in job["steps"])


def github(path):
    with open(path) as f:
        flow = yaml.safe_load(f)
    triggers = flow.get("on", flow.get(True))  # YAML 1.1 reads a bare `on` as true
    need(triggers and ("schedule" in triggers or "workflow_dispatch" in triggers),
         "%s: no schedule or workflow_dispatch trigger" % path)
    shard, merge = flow["jobs"]["shard"], flow["jobs"]["merge"]
    for name, job in (("shard", shard), ("merge", merge)):
        need("runs-on" in job and job.get("steps"), "%s: job %s lacks runs-on or steps" % (path, name))
    need(shard["strategy"].get("fail-fast") is False, "%s: a failing shard cancels others" % path)
    shards = shard["strategy"]["matrix"]["shard"]
    need(shards == list(range(len(shards))), "%s: the matrix is not shards 0..N-1" % path)
    for job in (shard, merge):
        for step in job["steps"]:
            run = str(step.get("run", "bash ci/setup"))
            need(run.startswith(("bash ci/setup", "build/release/tools/kvcheck ")),
                 "%s: a step runs %r, not one of kvcheck's commands" % (path, run[:40]))
    text = steps_text(shard)
    for piece in ("kvcheck campaign", "--shard-index ${{ matrix.shard }}",
                  "--shard-count ${{ strategy.job-total }}", "--seed ${{ github.run_id }}",
                  "--json shard-${{ matrix.shard }}.json", "actions/upload-artifact@"):
        need(piece in text, "%s: the shard job lacks %r" % (path, piece))
    upload = [s for s in shard["steps"] if "upload-artifact" in str(s.get("uses", ""))][0]
    need(upload.get("if") == "always()", "%s: a failed shard's report is not uploaded" % path)
    need(merge.get("needs") in ("shard", ["shard"]) and merge.get("if") == "always()",
         "%s: the merge job must need the shards and run always" % path)
    text = steps_text(merge)
    for piece in ("actions/download-artifact@", "kvcheck merge", "--junit merged.xml",
                  "--html merged.html", "action-junit-report", "merged.html"):
        need(piece in text, "%s: the merge job lacks %r" % (path, piece))
    return len(shards)


def container_command(job):
    spec = job["spec"]["template"]["spec"]
    need(spec.get("restartPolicy") == "Never", "%s: restartPolicy must be Never" % job["metadata"])
    container = spec["containers"][0]
    need(container.get("image"), "job %s: no image" % job["metadata"]["name"])
    return spec, container, [str(x) for x in container["command"] + container.get("args", [])]


def kubernetes(shards_path, merge_path):
    with open(shards_path) as f:
        documents = [d for d in yaml.safe_load_all(f) if d]
    kinds = {d["kind"]: d for d in documents}
    need(set(kinds) == {"PersistentVolumeClaim", "Job"}, "%s: kinds %s" % (shards_path, set(kinds)))
    claim, job = kinds["PersistentVolumeClaim"], kinds["Job"]
    need("ReadWriteMany" in claim["spec"]["accessModes"], "the claim is not ReadWriteMany")
    need(job["apiVersion"] == "batch/v1", "the shards Job is not batch/v1")
    spec = job["spec"]
    need(spec.get("completionMode") == "Indexed", "the shards Job is not Indexed")
    need(spec["completions"] == spec["parallelism"], "completions != parallelism")
    _, container, command = container_command(job)
    need(command[:2] == ["kvcheck", "campaign"], "the shards Job runs %s" % command[:2])
    count = command[command.index("--shard-count") + 1]
    need(int(count) == spec["completions"], "--shard-count %s != completions" % count)
    need("--shard-index" not in command, "the index must come from JOB_COMPLETION_INDEX")
    need(any("$(JOB_COMPLETION_INDEX)" in c for c in command), "reports are not named per index")
    rules = spec["podFailurePolicy"]["rules"]
    verdicts = [r for r in rules if r["action"] == "FailIndex"][0]["onExitCodes"]
    need(verdicts["containerName"] == container["name"] and {1, 4} <= set(verdicts["values"]),
         "a verdict (exit 1, 4) must end its index, not be retried")
    need(spec.get("backoffLimitPerIndex") is not None, "FailIndex needs backoffLimitPerIndex")
    with open(merge_path) as f:
        merge = yaml.safe_load(f)
    need(merge["kind"] == "Job" and merge["apiVersion"] == "batch/v1", "the merge is not a Job")
    mspec, _, command = container_command(merge)
    need(command[:2] == ["kvcheck", "merge"], "the merge Job runs %s" % command[:2])
    claims = {v["persistentVolumeClaim"]["claimName"] for v in mspec["volumes"]}
    need(claims == {claim["metadata"]["name"]}, "the merge reads another claim: %s" % claims)
    return int(count)


def slurm(shards_path, merge_path, submit_path):
    with open(shards_path) as f:
        text = f.read()
    array = re.search(r"^#SBATCH --array=(\d+)-(\d+)$", text, re.M)
    need(array and int(array.group(1)) in (0, 1), "%s: no --array=0-N (or 1-N)" % shards_path)
    need(re.search(r"^exec kvcheck campaign ", text, re.M), "%s: runs no campaign" % shards_path)
    need("--shard-" not in text, "%s: the shard must come from the array's variables" % shards_path)
    with open(merge_path) as f:
        need(re.search(r"^exec kvcheck merge ", f.read(), re.M), "%s: no merge" % merge_path)
    with open(submit_path) as f:
        need("--dependency=afterany:" in f.read(), "%s: the merge must wait for every task"
             % submit_path)
    return int(array.group(2)) - int(array.group(1)) + 1


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    d = os.path.join(sys.argv[1], "examples", "distributed")
    counts = {"GitHub Actions": github(os.path.join(d, "github-actions.yml")),
              "Kubernetes": kubernetes(os.path.join(d, "kubernetes-shards.yaml"),
                                       os.path.join(d, "kubernetes-merge.yaml")),
              "Slurm": slurm(os.path.join(d, "slurm-shards.sbatch"),
                             os.path.join(d, "slurm-merge.sbatch"),
                             os.path.join(d, "slurm-submit.sh"))}
    for name, n in counts.items():
        print("%s: %d shards, merged by kvcheck merge" % (name, n))


if __name__ == "__main__":
    main()
