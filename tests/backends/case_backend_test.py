"""No driver runs code that only a case file names (docs/ENGINES.md, "Case
files from foreign engines"): a case whose backend is a plugin: or exec: one
is refused before dlopen or exec, unless the user passes that backend.

    python3 case_backend_test.py MODE WORKDIR MARKER_PLUGIN CASE BINARY...

MARKER_PLUGIN (marker_plugin.cpp) writes $KVCHECK_MARKER when it is loaded;
the exec: backend is `touch MARKER`. CASE is a case file on backend cpu; the
test writes copies of it that name those two backends instead. MODE:

  kvcheck      BINARY is kvcheck: `replay CASE` and `shrink CASE` exit 2 with
               the message that names the --backend to pass, and leave no
               marker; `replay --backend B CASE` does load B (the marker
               appears), so its absence above means something.
  conformance  BINARY is a conformance binary (conformance/suite.cpp):
               `--replay CASE` and `--shrink CASE`, the same way (its registry
               has no exec: backend, so the control is the plugin's only).
  fuzz         BINARY... are the fuzz targets' replay drivers: given both
               cases as inputs, none loads or starts their backend. The
               schedule_fuzz driver does load a backend the user names in
               KVCHECK_BACKEND (the control).
"""
import os
import shutil
import subprocess
import sys

REFUSAL = "never loads a plugin or starts a command named by a case file"

failures = []


def check(what, ok, output=""):
    if not ok:
        failures.append("%s\n%s" % (what, output))


def write_case(template, backend, path):
    with open(template) as f:
        lines = f.read().splitlines()
    lines = ["backend " + backend if line.startswith("backend ") else line for line in lines]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run(command, workdir, marker, env_extra=None):
    if os.path.exists(marker):
        os.remove(marker)
    # Only the control names a backend in the environment.
    env = {k: v for k, v in os.environ.items() if k != "KVCHECK_BACKEND"}
    env.update(KVCHECK_MARKER=marker, **(env_extra or {}))
    p = subprocess.run(command, cwd=workdir, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout, os.path.exists(marker)


def shell_quote(text):
    return "'" + text.replace("'", "'\\''") + "'"


def refused(name, command, backend, workdir, marker):
    code, out, ran = run(command, workdir, marker)
    check("%s: exit %d, expected 2" % (name, code), code == 2, out)
    check("%s: no refusal naming the backend" % name,
          REFUSAL in out and "--backend " + shell_quote(backend) in out, out)
    check("%s: the case's backend ran (the marker exists)" % name, not ran, out)


def loaded(name, command, workdir, marker, env_extra=None):
    code, out, ran = run(command, workdir, marker, env_extra)
    check("%s: the backend the user named did not run (no marker): the control fails" % name,
          ran, out)


def main():
    mode, workdir, plugin, template = sys.argv[1:5]
    binaries = sys.argv[5:]
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    marker = os.path.join(workdir, "marker")
    backends = {"plugin": "plugin:" + plugin, "exec": "exec:touch " + marker}
    cases = {}
    for kind, backend in backends.items():
        cases[kind] = os.path.join(workdir, kind + ".case")
        write_case(template, backend, cases[kind])

    if mode in ("kvcheck", "conformance"):
        binary = binaries[0]
        for kind, backend in backends.items():
            case = cases[kind]
            if mode == "kvcheck":
                drivers = {"replay": [binary, "replay", case], "shrink": [binary, "shrink", case]}
                control = [binary, "replay", "--backend", backend, case]
            else:
                drivers = {"--replay": [binary, "--replay", case],
                           "--shrink": [binary, "--shrink", case]}
                control = [binary, "--backend", backend, "--replay", case]
            for name, command in drivers.items():
                refused("%s %s on a %s case" % (mode, name, kind), command, backend, workdir,
                        marker)
            # A conformance binary's registry has no exec: backend to control.
            if mode == "kvcheck" or kind == "plugin":
                loaded("%s with --backend %s" % (mode, backend), control, workdir, marker)
    elif mode == "fuzz":
        for binary in binaries:
            name = os.path.basename(binary)
            code, out, ran = run([binary, cases["plugin"], cases["exec"]], workdir, marker)
            check("%s: exit %d, expected 0" % (name, code), code == 0, out)
            check("%s: a case's backend ran (the marker exists)" % name, not ran, out)
            if name.startswith("schedule_fuzz"):
                loaded(name + " with KVCHECK_BACKEND", [binary, cases["plugin"]], workdir, marker,
                       {"KVCHECK_BACKEND": backends["plugin"]})
    else:
        sys.exit("unknown mode " + mode)

    for failure in failures:
        print("FAIL: " + failure)
    print("%s: %d failures" % (mode, len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
