#!/usr/bin/env python3
"""ctest proof_of_use: the campaign's proof-of-use table (docs/REPORTS.md,
"Proof of use") in every report, and its warning.

1. Every property on the in-tree engine, a fixed number of cases (so the
   counts depend only on the seed): each feature the cpu backend declares
   was drawn and happened (the observations work end to end), happened never
   exceeds drawn, and no warning is printed.
2. P1 alone: key partitioning is observed by P15 only, so the declared
   feature never happens, and the warning names it, with the count, in the
   console, the JSON, the JUnit XML and the HTML.

usage: proof_of_use_test.py KVCHECK WORKDIR
"""
import json
import os
import subprocess
import sys

errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def campaign(kvcheck, workdir, tag, extra):
    out = {k: os.path.join(workdir, f"{tag}.{k}") for k in ("json", "xml", "html")}
    args = [kvcheck, "campaign", "--seed", "11", "--no-kill-matrix", "--backend", "cpu",
            "--time", "300", "--json", out["json"], "--junit", out["xml"], "--html", out["html"],
            "--failures", os.path.join(workdir, tag + "-failures")] + extra
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    check(p.returncode == 0, f"{tag}: exit {p.returncode}: {p.stdout[-2000:]} {p.stderr[-2000:]}")
    texts = {k: open(v).read() if os.path.exists(v) else "" for k, v in out.items()}
    return p.stdout, texts


def main():
    kvcheck, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)

    console, texts = campaign(kvcheck, workdir, "all", ["--cases", "150"])
    report = json.loads(texts["json"] or "{}")
    rows = report.get("proof_of_use", {}).get("cpu", [])
    check(len(rows) == 6, f"all: proof_of_use rows for cpu: {rows}")
    for row in rows:
        check(row["declared"], f"all: cpu declares every feature: {row}")
        check(0 < row["happened"] <= row["drawn"], f"all: drawn and happened: {row}")
        check(f"{row['feature']}" in console, f"all: console lacks {row['feature']}")
    check(report.get("warnings") == [], f"all: warnings {report.get('warnings')}")
    check("proof of use on cpu" in console, "all: console lacks the proof-of-use table")
    check("Proof of use" in texts["html"], "all: HTML lacks the proof-of-use section")

    console, texts = campaign(kvcheck, workdir, "p1", ["--cases", "40", "--property", "oracle"])
    report = json.loads(texts["json"] or "{}")
    warning = "cpu declares key partitioning, yet no case drawn could use it"
    check(any(w.startswith(warning) for w in report.get("warnings", [])),
          f"p1: JSON warnings {report.get('warnings')}")
    check("warning: " + warning in console, "p1: console lacks the warning")
    check(warning in texts["xml"] and "<system-out>" in texts["xml"], "p1: JUnit lacks it")
    check(warning in texts["html"], "p1: HTML lacks it")

    for e in errors:
        print("FAIL:", e)
    print("proof_of_use:", "FAILED" if errors else "ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
