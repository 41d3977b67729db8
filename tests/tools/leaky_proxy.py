"""Relays the engine protocol to a real engine with a bug that leaks state
from one case to the next: a memo of the logits of a sequence's first token,
kept for the whole process and keyed by too little (the token and the
vocabulary size, not the model). A sequence whose first token misses the memo
gets the engine's logits and fills it; one that hits it, on another engine,
gets the row memoized for another engine, which is wrong when that engine's
model had other weights. So a case fails only after the case before it fed
the same first token to another model of the same vocabulary: in a fresh
process every case passes.

    python3 leaky_proxy.py -- COMMAND ARGS...

A test-only engine under test for the state-leak search of kvcheck campaign
(tools/leak_search.h): its case files must carry the cases before them.
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faulty_proxy import frame, read_frame  # noqa: E402


class Memo:
    """The leak: one row, from the last first token that missed it."""

    def __init__(self):
        self.key = None  # (token, vocab)
        self.engine = None
        self.row = None
        self.seen = set()  # (engine, sequence) already fed: not at position 0

    def first_rows(self, request, reply, logits):
        """The logits bytes with each entry's first row memoized or served."""
        engine = request["engine"]
        entries = request["entries"]
        reused = reply.get("reused", [0] * len(entries))  # rows from a prefix cache: NaN
        tokens = sum(len(e["tokens"]) for e in entries)
        row = len(logits) // tokens
        out = bytearray(logits)
        at = 0
        for e, cached in zip(entries, reused):
            if (engine, e["sequence"]) not in self.seen:
                self.seen.add((engine, e["sequence"]))
                if cached:
                    at += row * len(e["tokens"])
                    continue
                key = (e["tokens"][0], row)
                if key == self.key and engine != self.engine:
                    out[at:at + row] = self.row
                else:
                    self.key, self.engine, self.row = key, engine, bytes(out[at:at + row])
            at += row * len(e["tokens"])
        return bytes(out)


def main():
    command = sys.argv[1:]
    command = command[1:] if command[:1] == ["--"] else command
    inner = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    memo = Memo()
    while True:
        request = read_frame(inp)
        inner.stdin.write(frame(request))
        inner.stdin.flush()
        control = read_frame(inner.stdout)
        reply = json.loads(control)
        payloads = [read_frame(inner.stdout) for _ in reply.get("payloads", [])]
        parsed = json.loads(request)
        if parsed.get("op") == "step" and "error" not in reply and payloads:
            payloads[0] = memo.first_rows(parsed, reply, payloads[0])
        if parsed.get("op") == "fork" and "error" not in reply:
            # A fork's child starts past position 0 (version 2 names it in
            # the request, version 1 in the reply).
            memo.seen.add((parsed["engine"], parsed.get("sequence", reply.get("sequence"))))
        out.write(frame(control) + b"".join(frame(p) for p in payloads))
        out.flush()


if __name__ == "__main__":
    main()
