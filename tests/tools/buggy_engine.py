"""A stand-in engine with one of a learner's bugs, through the Python helper
(no torch): its logits and K/V are zeros, so only what the bug breaks is
meant to be looked at.

    python3 buggy_engine.py --bug BUG [--pids FILE]

  raise_in_step       step raises from a helper, as an attention whose shapes
                      disagree does: kvcheck must print the place (the helper's
                      "trace") with the failure and keep it in the case file
  inconsistent_length the position pointer runs one ahead of the cache
                      tensors: the cache reply's length (from length()) and
                      its K/V (from cache()) disagree, a cache failure

--pids FILE: append this process's id to FILE when it starts.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "adapters", "python"))
import kvcheck_adapter as kv  # noqa: E402


def attend(tokens):
    raise ValueError("q and k disagree: %d tokens against a cache of 0" % len(tokens))


class Engine:
    def __init__(self, config, capacity, bug):
        self.c, self.capacity, self.bug = config, capacity, bug
        self.fed, self.next = {}, 0

    def start(self):
        self.next += 1
        self.fed[self.next] = 0
        return self.next

    def step(self, entries):
        if self.bug == "raise_in_step":
            return attend(entries[0][1])
        for sequence, tokens in entries:
            if self.fed[sequence] + len(tokens) > self.capacity:
                raise kv.EngineError("capacity", "past capacity %d" % self.capacity)
        for sequence, tokens in entries:
            self.fed[sequence] += len(tokens)
        return bytes(4 * sum(len(t) for _, t in entries) * self.c["vocab"])

    def finish(self, sequence):
        del self.fed[sequence]

    def reset(self):
        self.fed.clear()

    def length(self, sequence):
        return self.fed[sequence] + (self.bug == "inconsistent_length")

    def cache(self, sequence, layer):
        k = bytes(4 * self.fed[sequence] * self.c["n_kv_heads"] * self.c["head_dim"])
        return k, k


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bug", required=True, choices=["raise_in_step", "inconsistent_length"])
    parser.add_argument("--pids")
    args = parser.parse_args()
    if args.pids:
        with open(args.pids, "a") as f:
            f.write("%d\n" % os.getpid())

    def load(folder):
        with open(os.path.join(folder, "config.json")) as f:
            return json.load(f)

    kv.serve({"identity": {"name": "buggy-" + args.bug}, "limits": {"max_capacity": 1024}},
             lambda config, capacity, max_rows, kv_dtype: Engine(config, capacity, args.bug),
             load=load)


if __name__ == "__main__":
    main()
