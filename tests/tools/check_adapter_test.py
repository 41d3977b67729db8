"""kvcheck check-adapter tells the adapter's side from the engine's side.

    check_adapter_test.py KVCHECK KVCHECK_SERVE protocol
        kvcheck-serve is clean (exit 0); a proxy that sends a wrong-shape
        logits payload, or omits a reply, is a protocol violation and no cache
        bug (exit 1), and so is a proxy that refuses the fork its traits
        declare; kvcheck-serve --fault shift_wrong_sign and a proxy that lists
        wrong snapshot positions are cache bugs only (exit 1); a backend that
        is not exec: is bad input (exit 2).
    check_adapter_test.py KVCHECK KVCHECK_SERVE shapes
        an engine that cannot load GQA or MQA models (a proxy that refuses
        their loads) has each such shape named, with the limit to declare
        (exit 1); declaring limits.mha_only, check-adapter skips them (exit 0)
        and a campaign draws MHA models only, with P7 not run.
    check_adapter_test.py KVCHECK PYTHON_WITH_TORCH torch
        adapters/torch/engine.py is clean; each of its traps is a cache bug and
        no protocol violation (exit 1).
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(kvcheck, backend, code, *words):
    run = subprocess.run([kvcheck, "check-adapter", "--backend", backend],
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    problems = []
    if run.returncode != code:
        problems.append("exit %d, expected %d" % (run.returncode, code))
    problems += ["no %r in the output" % w for w in words if w not in out]
    if problems:
        sys.exit("check-adapter --backend %s: %s\n%s" % (backend, "; ".join(problems), out))
    print("ok: %s -> exit %d" % (backend, code))


def main():
    kvcheck, tool, mode = sys.argv[1:4]
    if mode == "protocol":
        check(kvcheck, "exec:" + tool, 0, "0 protocol violations, 0 cache bugs", "protocol 2")
        check(kvcheck, "exec:%s --protocol 1" % tool, 0, "0 protocol violations, 0 cache bugs",
              "hello: protocol 1")
        proxy = "exec:%s %s/tests/tools/faulty_proxy.py --fault %%s --at 1 -- %s?timeout=3" % (
            sys.executable, ROOT, tool)
        check(kvcheck, proxy % "wrong_shape", 1, "1 protocol violations, 0 cache bugs",
              "PROTOCOL VIOLATION  llama gqa: step (two sequences, 3 + 2 tokens): logits must be "
              "one payload of 5 tokens x vocab 64 x 4 = 1280 bytes, got 1276 bytes")
        check(kvcheck, proxy % "omit_reply", 1, "1 protocol violations, 0 cache bugs",
              "step: no reply within 3000 ms")
        check(kvcheck, proxy % "garbage", 1, "1 protocol violations, 0 cache bugs",
              "malformed reply: a control frame of 2147483647 bytes")
        check(kvcheck, proxy % "unsupported_fork", 1, "PROTOCOL VIOLATION  llama gqa: fork of 2 "
              "tokens: a well-formed request got error unsupported: faulty_proxy: no fork")
        # A context shift whose keys are re-rotated the wrong way, and a child
        # that lists every snapshot position one too high: the engine's side.
        check(kvcheck, "exec:%s --fault shift_wrong_sign" % tool, 1, " 0 protocol violations",
              "CACHE BUG           llama gqa: step after the context shift")
        check(kvcheck, proxy % "wrong_positions", 1, " 0 protocol violations",
              "CACHE BUG           llama gqa: cache after the context shift layer 0: slot 0 "
              "holds position 1, the history puts 0 there")
        check(kvcheck, "cpu", 2, "check-adapter checks exec: backends only")
    elif mode == "shapes":
        proxy = "exec:%s %s/tests/tools/faulty_proxy.py --fault mha_loads_only%%s -- %s" % (
            sys.executable, ROOT, tool)
        check(kvcheck, proxy % "", 1, "0 protocol violations, 0 cache bugs, 4 refused shapes",
              "SHAPE REFUSED       gpt2 GQA (4 heads of 8 over 2 KV heads, d_model 32, d_ff 128): "
              "the traits allow it; declare limits.mha_only, or make the engine take it\n"
              "                      load refused: internal: faulty_proxy: n_kv_heads 2 != "
              "n_heads 4 (MHA only)")
        honest = proxy % " --declare-mha-only"
        check(kvcheck, honest, 0, "0 protocol violations, 0 cache bugs, 0 refused shapes",
              "skip gpt2 MQA (4 heads of 8 over 1 KV head, d_model 32, d_ff 128): the traits "
              "exclude it (n_kv_heads 1 differs from n_heads 4 (limits.mha_only))")
        run = subprocess.run([kvcheck, "campaign", "--seed", "4", "--time", "120", "--cases", "60",
                              "--no-kill-matrix", "--property", "oracle,gqa", "--backend", honest],
                             capture_output=True, text=True, timeout=300)
        out = run.stdout + run.stderr
        if run.returncode != 0 or "not run: the engine takes MHA models only" not in out:
            sys.exit("campaign on the MHA-only engine: exit %d\n%s" % (run.returncode, out))
        print("ok: a campaign on the MHA-only engine draws only what it loads")
    elif mode == "torch":
        engine = "exec:%s %s/adapters/torch/engine.py" % (tool, ROOT)
        check(kvcheck, engine, 0, "0 protocol violations, 0 cache bugs")
        for trap in ("forget_reset", "repeat", "restart_positions"):
            check(kvcheck, engine + " --trap " + trap, 1, " 0 protocol violations", "CACHE BUG")
        check(kvcheck, engine + " --trap noop_truncate", 1, " 0 protocol violations",
              "CACHE BUG           llama gqa: length after truncate: length 3, 2 tokens fed")
    else:
        sys.exit("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
