#!/usr/bin/env python3
"""ctest report_junit: `kvcheck campaign --junit` against the campaign's own
console table and --json summary.

Structure is checked against the required attributes of the JUnit schemas CI
systems read (docs/REPORTS.md): the Jenkins junit XSD (testsuite: name,
tests; testcase: name) and the stricter Ant JUnit.xsd (testsuite: name,
tests, failures, errors, time, timestamp, hostname; testcase: name,
classname, time; failure: type). Counts on every suite and on <testsuites>
must equal the cases below them, and those must equal the console table's
rows, FAILED rows and not-applicable-only rows, and the JSON's.

usage: check_junit.py KVCHECK WORKDIR
"""
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

# property, backend, cases, applied, passed, n/a, worst e/b, result
ROW = re.compile(r"^(P\d+ \w+)\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(.*)$")
SUITE_ATTRS = ["name", "tests", "failures", "errors", "skipped", "time", "timestamp", "hostname"]
CASE_ATTRS = ["name", "classname", "time"]
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def run(kvcheck, workdir, tag, extra):
    xml_path = os.path.join(workdir, tag + ".xml")
    json_path = os.path.join(workdir, tag + ".json")
    args = [kvcheck, "campaign", "--seed", "7", "--junit", xml_path, "--json", json_path,
            "--failures", os.path.join(workdir, tag + "-failures")] + extra
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    check(p.returncode in (0, 1), f"{tag}: exit {p.returncode}: {p.stderr}")
    with open(json_path) as f:
        summary = json.load(f)
    return ET.parse(xml_path).getroot(), summary, p.stdout, p.returncode


def case_kind(case):
    if case.find("failure") is not None:
        return "failed"
    if case.find("skipped") is not None:
        return "skipped"
    return "passed"


def check_structure(tag, root):
    check(root.tag == "testsuites", f"{tag}: root is <{root.tag}>")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for suite in root.findall("testsuite"):
        name = suite.get("name")
        for a in SUITE_ATTRS:
            check(suite.get(a) is not None, f"{tag}: testsuite {name} lacks {a}")
        cases = suite.findall("testcase")
        kinds = [case_kind(c) for c in cases]
        for c in cases:
            for a in CASE_ATTRS:
                check(c.get(a) is not None, f"{tag}: testcase in {name} lacks {a}")
            float(c.get("time"))
            for f in c.findall("failure"):
                check(f.get("type") and f.get("message"), f"{tag}: failure without type/message")
        counts = {"tests": len(cases), "failures": kinds.count("failed"),
                  "skipped": kinds.count("skipped")}
        for k, v in counts.items():
            check(int(suite.get(k)) == v, f"{tag}: suite {name} says {k}={suite.get(k)}, has {v}")
            totals[k] += v
        check(suite.get("errors") == "0", f"{tag}: suite {name} errors")
    for k, v in totals.items():
        check(int(root.get(k)) == v, f"{tag}: testsuites says {k}={root.get(k)}, has {v}")
    return totals


def check_against_summary(tag, root, summary, console, rc):
    rows = [ROW.match(line) for line in console.splitlines()]
    rows = [m for m in rows if m]
    props = summary.get("properties", [])
    check(len(rows) == len(props), f"{tag}: console has {len(rows)} rows, JSON {len(props)}")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    for b in summary["backends"]:
        spec = b["backend"]
        suite = suites.get(spec)
        check(suite is not None, f"{tag}: no testsuite for backend {spec}")
        if suite is None:
            continue
        mine = [p for p in props if p["backend"] == spec]
        console_rows = [m for m in rows if m.group(2) == spec]
        failed = sum(p["failed"] for p in mine)
        skipped = sum(1 for p in mine if p["not_run"] is not None)
        for p in mine:
            check((p["not_run"] is not None) == (not p["failed"] and p["applied"] == 0),
                  f"{tag}: {spec} {p['property']}: not_run {p['not_run']!r} with {p['applied']} applied")
            check(p["cases"] == p["applied"] + p["not_applicable"],
                  f"{tag}: {spec} {p['property']}: cases != applied + not applicable")
            check(p["passed"] <= p["applied"], f"{tag}: {spec} {p['property']}: passed > applied")
        check(int(suite.get("tests")) == len(mine) == len(console_rows),
              f"{tag}: {spec}: tests {suite.get('tests')}, JSON {len(mine)}, console {len(console_rows)}")
        check(int(suite.get("failures")) == failed ==
              sum("FAILED:" in m.group(8) for m in console_rows),
              f"{tag}: {spec}: failures {suite.get('failures')}, JSON {failed}")
        check(int(suite.get("skipped")) == skipped ==
              sum(m.group(8).startswith("not run:") for m in console_rows),
              f"{tag}: {spec}: skipped {suite.get('skipped')}, JSON {skipped}")
        for case in suite.findall("testcase"):
            f = case.find("failure")
            if f is None:
                continue
            p = next(p for p in mine if case.get("name").endswith(" " + p["property"]))
            check(f.get("message") == p["failure"], f"{tag}: failure message differs from JSON")
            path = re.search(r"^case file: (.*)$", f.text, re.M)
            check(path and os.path.isfile(path.group(1)), f"{tag}: failure names no case file")
        kills = [k for k in summary.get("kill_matrix", []) if k["backend"] == spec]
        ksuite = suites.get("kill-matrix " + spec)
        if kills:
            check(ksuite is not None, f"{tag}: no kill-matrix suite for {spec}")
            if ksuite is not None:
                check(int(ksuite.get("tests")) == len(kills), f"{tag}: kill rows differ")
                check(int(ksuite.get("failures")) == sum(bool(k["problems"]) for k in kills),
                      f"{tag}: kill failures differ")
    failures = int(root.get("failures"))
    check((failures > 0) == (rc == 1), f"{tag}: {failures} failures but exit {rc}")


def main():
    kvcheck, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    runs = {
        # Budgets in cases; --time only bounds a hung run (ctest's TIMEOUT is
        # 300 s), so a loaded machine takes longer, never gets another verdict.
        "clean": ["--cases", "20", "--time", "280"],
        # One backend and no --reference: P10 has nothing to compare with.
        "alone": ["--backend", "cpu", "--cases", "10", "--time", "280", "--no-kill-matrix"],
        "fault": ["--fault", "kv_swapped", "--property", "cache_state", "--cases", "50",
                  "--time", "280"],
        # Every property failing, P1's summary with a '>' to escape.
        "shared_rows": ["--fault", "shared_rows", "--cases", "20", "--time", "280"],
    }
    for tag, extra in runs.items():
        root, summary, console, rc = run(kvcheck, workdir, tag, extra)
        totals = check_structure(tag, root)
        check_against_summary(tag, root, summary, console, rc)
        print(f"{tag}: {totals} (exit {rc})")
    check(int(ET.parse(os.path.join(workdir, "fault.xml")).getroot().get("failures")) >= 1,
          "fault: kv_swapped caused no failure")
    check(int(ET.parse(os.path.join(workdir, "alone.xml")).getroot().get("skipped")) >= 1,
          "alone: P10 with one backend and no --reference should be skipped")
    clean = json.load(open(os.path.join(workdir, "clean.json")))
    check(all(t["applied"] > 0 for t in clean["properties"] if t["property"] == "cross_engine"),
          "clean: P10 should run by default (cpu against cpu-reference, and back)")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
