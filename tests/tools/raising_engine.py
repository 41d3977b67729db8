"""An engine whose step raises from a helper, as a learner's attention does
when its shapes disagree: kvcheck must print the place (the Python helper's
"trace") with the failure and keep it in the case file.

    python3 raising_engine.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "adapters", "python"))
import kvcheck_adapter as kv  # noqa: E402


def attend(tokens):
    raise ValueError("q and k disagree: %d tokens against a cache of 0" % len(tokens))


class Engine:
    def __init__(self):
        self.lengths, self.next = {}, 0

    def start(self):
        self.next += 1
        self.lengths[self.next] = 0
        return self.next

    def step(self, entries):
        return attend(entries[0][1])

    def length(self, sequence):
        return self.lengths[sequence]


kv.serve({"identity": {"name": "raising"},
          "operations": {"cache_snapshot": False, "finish": False, "reset": False}},
         lambda model, capacity, max_rows, kv_dtype: Engine(), load=lambda folder: {})
