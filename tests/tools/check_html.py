#!/usr/bin/env python3
"""ctest report_html: `kvcheck campaign --html` and `kvcheck replay --html`
write one well-formed, self-contained page that shows every failure.

Well-formed: every element opened is closed in order (HTML void elements
aside), one <html>, <head>, <body>. Self-contained: no "http" anywhere (no
URL, not even an svg xmlns), no <script>, no src=/href= other than "#..."
anchors, no CSS url(). Complete: the seed, every backend, every failing
property's summary and case file path, one error/bound histogram per P1/P6
row, one heat-map row per kill-matrix row, one error map per P1 failure and
a K and a V map per P6 failure, a cache timeline per failure; for shared_rows
the timeline shows a row that two sequences hold. Readable: every kill-matrix
problem as text at the top, no scrolling box, backend cells that wrap, long
not-applicable lists folded.

usage: check_html.py KVCHECK WORKDIR
"""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys

VOID = {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "area", "base", "source"}
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


class Checker(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.counts, self.text, self.links = [], {}, [], []

    def handle_starttag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href", "xlink:href"):
                self.links.append(value)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.counts[tag] = self.counts.get(tag, 0) + 1  # <rect/> in svg

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def parse(tag, path):
    with open(path, encoding="utf-8") as f:
        page = f.read()
    p = Checker()
    p.feed(page)
    p.close()
    check(not p.stack, f"{tag}: unclosed elements {p.stack}")
    for t in ("html", "head", "body", "style"):
        check(p.counts.get(t) == 1, f"{tag}: {p.counts.get(t)} <{t}> elements")
    head = page[: page.find("</head>")]
    check(head.count("<title>") == 1, f"{tag}: the head has no single <title>")
    check("http" not in page.lower(), f"{tag}: holds 'http'")
    check("<script" not in page.lower(), f"{tag}: holds a script")
    check("url(" not in page, f"{tag}: CSS url()")
    check(all(link.startswith("#") for link in p.links), f"{tag}: external links {p.links}")
    check(page.startswith("<!DOCTYPE html>"), f"{tag}: no doctype")
    return page, p, "".join(p.text)


def kvcheck(binary, args, tag):
    r = subprocess.run([binary] + args, capture_output=True, text=True, timeout=120)
    check(r.returncode in (0, 1), f"{tag}: exit {r.returncode}: {r.stderr}")
    return r


def check_campaign(tag, binary, workdir, extra):
    page_path = os.path.join(workdir, tag + ".html")
    json_path = os.path.join(workdir, tag + ".json")
    failures = os.path.join(workdir, tag + "-failures")
    kvcheck(binary, ["campaign", "--seed", "11", "--html", page_path, "--json", json_path,
                     "--failures", failures] + extra, tag)
    with open(json_path) as f:
        summary = json.load(f)
    page, p, text = parse(tag, page_path)
    check(str(summary["seed"]) in text, f"{tag}: seed missing")
    for b in summary["backends"]:
        check(b["backend"] in text, f"{tag}: backend {b['backend']} missing")
    failed = [r for r in summary["properties"] if r["failed"]]
    for r in failed:
        check(r["failure"] in text, f"{tag}: failure summary missing: {r['failure']}")
    check(len(re.findall(r'id="failure-\d+"', page)) == len(failed),
          f"{tag}: {len(failed)} failures, sections differ")
    p1_failed = [r for r in failed if r["property"] == "oracle"]
    p6_failed = [r for r in failed if r["property"] == "cache_state"]
    check(page.count('class="emap"') == len(p1_failed) + 2 * len(p6_failed),
          f"{tag}: one error map per P1 failure and two per P6 failure")
    check(page.count("P6 error map of cached K") == len(p6_failed), f"{tag}: P6 K maps differ")
    check(page.count("<b>Cache timeline</b>") == len(failed), f"{tag}: one timeline per failure")
    check(failed == [] or 'class="frame"' in page, f"{tag}: the cpu timeline has no frames")
    case_files = [os.path.join(d, f) for d, _, fs in os.walk(failures) for f in fs]
    for c in case_files:
        check(c in text, f"{tag}: case file {c} not named")
    measured = [r for r in summary["properties"] if r["property"] in ("oracle", "cache_state")]
    check(page.count('class="hist"') == len(measured), f"{tag}: histograms differ")
    kills = summary.get("kill_matrix", [])
    cells = sum(1 + len(k.get("per_property", [])) for k in kills)
    check(page.count('class="cell"') == cells, f"{tag}: kill-matrix cells differ")
    # A kill-matrix problem is text at the top, not only a cell's tooltip.
    top = text[: text.find("Backends and their traits")]
    for k in kills:
        for problem in k["problems"]:
            check(f"kill matrix on {k['backend']}: {problem}" in top,
                  f"{tag}: kill-matrix problem not in the summary: {problem}")
    # The case file is shown whole (no scrolling box), long backend strings wrap.
    check("max-height" not in page, f"{tag}: a box with a max-height scrolls")
    check(".b{min-width:8em;max-width:16em;overflow-wrap:anywhere}" in page, f"{tag}: backend cells do not wrap")
    # Not-applicable reasons beyond two per row are folded.
    for r in summary["properties"]:
        shapes = {re.sub(r"\d+", "#", why) for why in r["not_applicable_why"]}
        if len(shapes) > 2:
            check("<details class=\"why\">" in page, f"{tag}: a long reason list is not folded")
    return failed, failures, summary


def main():
    binary, workdir = sys.argv[1], sys.argv[2]
    shutil.rmtree(workdir, ignore_errors=True)  # a rerun must not see the last run's case files
    os.makedirs(workdir)
    failed, folder, _ = check_campaign("fault", binary, workdir,
                                       ["--fault", "shared_rows", "--cases", "20", "--time", "60"])
    check(len(failed) >= 1, "fault: shared_rows caused no failure")
    with open(os.path.join(workdir, "fault.html"), encoding="utf-8") as f:
        check("row 0: s0+s1" in f.read(), "fault: no timeline frame shows row 0 held by s0 and s1")
    check_campaign("clean", binary, workdir,
                   ["--cases", "10", "--time", "60", "--kill-per-property", "--kill-cases", "10",
                    "--backend", "cpu"])
    # Too few kill cases: faults survive, and the page says so at the top.
    _, _, weak = check_campaign("weak", binary, workdir,
                                ["--cases", "200", "--time", "60", "--kill-cases", "2",
                                 "--property", "capacity", "--backend", "cpu"])
    check(any(k["problems"] for k in weak["kill_matrix"]), "weak: no kill-matrix problem")
    page_path = os.path.join(workdir, "replay.html")
    kvcheck(binary, ["replay", folder, "--html", page_path], "replay")
    page, p, text = parse("replay", page_path)
    for r in failed:
        check(r["failure"] in text, f"replay: failure summary missing: {r['failure']}")
    print(f"fault: {len(failed)} failures shown; clean and replay pages checked")
    for e in errors:
        print("FAIL:", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
