#!/usr/bin/python3
"""`kvcheck ... --model DIR` end to end, on the checkpoints PyTorch wrote for
the hf_checkpoints ctest fixture (tools/hf_checkpoint_torch.py):

- a short campaign on the GPT-2 and the Llama checkpoint passes on cpu;
- every refused folder exits 2 with a message naming the field or tensor;
- a campaign with a fault switch writes a case file that records the folder
  and its hash; replay without --model asks for it, with it reproduces the
  failure (and passes without the fault), shrink keeps the model, and once a
  file of the checkpoint changes, replay refuses (exit 2).

  hf_model_cli.py KVCHECK CHECKPOINTS WORK_DIR
"""

import glob
import os
import shutil
import subprocess
import sys

kvcheck, checkpoints, work = sys.argv[1:4]
failures = []


def run(*args):
    p = subprocess.run([kvcheck, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def expect(condition, what, output=""):
    if not condition:
        failures.append(f"{what}\n--- output (tail) ---\n{output[-3000:]}")


def expect_run(args, code, *texts):
    rc, out = run(*args)
    expect(rc == code, f"kvcheck {' '.join(args)}: exit {rc}, expected {code}", out)
    for text in texts:
        expect(text in out, f"kvcheck {' '.join(args)}: no {text!r} in the output", out)
    return out


if os.path.exists(os.path.join(checkpoints, "TORCH_MISSING")):
    print("hf_model_cli: skipped, PyTorch is not installed (the hf_checkpoints fixture wrote no "
          "checkpoints)")
    sys.exit(77)
if os.path.isdir(work):
    shutil.rmtree(work)
os.makedirs(work)
# A budget of cases (--time only bounds a hung run): the same cases everywhere.
quick = ["--backend", "cpu", "--cases", "200", "--time", "120", "--no-kill-matrix", "--seed", "1"]

for name, family in (("gpt2", "gpt2, 2 layers"), ("llama", "llama, 2 layers, d_model 32, 8 heads "
                                                            "over 2 kv heads, head_dim 6")):
    expect_run(["campaign", "--model", f"{checkpoints}/{name}", *quick], 0, family,
               "generators vary schedules and tokens only", "every property held")

refused = {
    "bad_unknown_tensor": 'unexpected tensor "h.1.attn.rotary.weight"',
    "bad_missing_tensor": 'missing tensor "model.layers.1.mlp.up_proj.weight"',
    "bad_shape": 'tensor "wpe.weight": shape [31, 16] does not match',
    "bad_rope_scaling": 'rope_scaling: {"factor":2.0,"type":"linear"}',
    "bad_attention_bias": "attention_bias: true",
    "bad_activation": 'activation_function: "gelu"',
    "bad_unknown_field": "logit_scale: 0.5",
}
for folder, message in refused.items():
    expect_run(["campaign", "--model", f"{checkpoints}/{folder}", *quick], 2, message)

# A failing --model run and its case file.
model = os.path.join(work, "gpt2")
shutil.copytree(f"{checkpoints}/gpt2", model)
failures_dir = os.path.join(work, "failures")
expect_run(["campaign", "--model", model, "--backend", "cpu", "--time", "30", "--no-kill-matrix",
            "--seed", "3", "--property", "oracle", "--fault", "decode_position_zero",
            "--failures", failures_dir], 1, "a property caught the fault", "replay:    kvcheck "
           f"replay --model '{model}'")
cases = glob.glob(f"{failures_dir}/*.case")
expect(len(cases) == 1, f"expected one case file in {failures_dir}, found {cases}")
if cases:
    case = cases[0]
    text = open(case).read()
    expect(f"\nmodel {model}\n" in text and "\nmodel_hash fnv1a64:" in text,
           "the case file records the model and its hash", text)
    expect_run(["replay", case], 2, f"pass it: --model '{model}'")
    expect_run(["replay", "--model", model, case], 1, "the same verdict as recorded")
    expect_run(["replay", "--model", model, "--fault", "none", case], 0, "P1 passed")
    expect_run(["replay", "--model", f"{checkpoints}/llama", case], 2,
                "the checkpoint changed since")
    expect_run(["shrink", "--model", model, case], 0, f"--model '{model}'")
    shrunk = glob.glob(f"{failures_dir}/*.shrunk.case")
    expect(len(shrunk) == 1 and f"\nmodel {model}\n" in open(shrunk[0]).read(),
           "the shrunk case keeps the model", str(shrunk))
    # A seeded case refuses a checkpoint it did not record.
    seeded = os.path.join(os.path.dirname(os.path.abspath(__file__)), "prefill_then_decode.case")
    expect_run(["replay", "--model", model, seeded], 2, "replay it without --model")
    # One changed byte in the weights: the case no longer names these files.
    weights = os.path.join(model, "model.safetensors")
    data = bytearray(open(weights, "rb").read())
    data[-1] ^= 0x01
    open(weights, "wb").write(data)
    expect_run(["replay", "--model", model, case], 2, "the checkpoint changed since")

if failures:
    print(f"{len(failures)} checks failed:\n\n" + "\n\n".join(failures))
    sys.exit(1)
print("hf_model_cli: every check passed")
