#!/usr/bin/env python3
"""ClusterFuzzLite builds the fuzz targets ci/test fuzzes, and both are every
target fuzz/CMakeLists.txt defines.

    fuzz_targets_test.py SOURCE_DIR

Reads the `fuzz_targets=(...)` line of ci/test and of
.clusterfuzzlite/build.sh and the kvcheck_fuzz_target(NAME ...) calls of
fuzz/CMakeLists.txt; fails naming the targets one list has and another
lacks, a build.sh that does not build and copy its own list, or an odd
count (ci/test fuzzes two at a time).
"""
import os
import re
import sys


def targets_line(path):
    with open(path) as f:
        text = f.read()
    lines = re.findall(r"^\s*fuzz_targets=\(([^)]*)\)\s*$", text, re.M)
    if len(lines) != 1:
        sys.exit("FAIL: %s: expected one line fuzz_targets=(...), found %d" % (path, len(lines)))
    return lines[0].split(), text


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    ci, _ = targets_line(os.path.join(root, "ci", "test"))
    cflite, build_sh = targets_line(os.path.join(root, ".clusterfuzzlite", "build.sh"))
    with open(os.path.join(root, "fuzz", "CMakeLists.txt")) as f:
        defined = re.findall(r"^kvcheck_fuzz_target\((\w+)", f.read(), re.M)
    lists = {"ci/test": ci, ".clusterfuzzlite/build.sh": cflite, "fuzz/CMakeLists.txt": defined}
    for name, targets in lists.items():
        if len(set(targets)) != len(targets):
            sys.exit("FAIL: %s names a target twice: %s" % (name, targets))
        for other, others in lists.items():
            missing = sorted(set(others) - set(targets))
            if missing:
                sys.exit("FAIL: %s lacks %s, which %s has" % (name, ", ".join(missing), other))
    if len(ci) % 2:
        sys.exit("FAIL: ci/test fuzzes two targets at a time; it lists %d" % len(ci))
    for use in ('--target \\\n  "${fuzz_targets[@]}"', 'for target in "${fuzz_targets[@]}"'):
        if use not in build_sh:
            sys.exit("FAIL: .clusterfuzzlite/build.sh does not use its list: no %r" % use)
    print("ci/test, .clusterfuzzlite/build.sh and fuzz/CMakeLists.txt: %s" % ", ".join(ci))


if __name__ == "__main__":
    main()
