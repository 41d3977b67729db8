"""adapters/python/kvcheck_adapter.py's dispatch of the optional operations
(pool, storage_check, the prefix cache, the paged create keys, erase, shift, div, offload,
save, restore and a snapshot's positions) on a stand-in
engine: the replies must have the protocol's form (docs/ENGINE_PROTOCOL.md),
with kvcheck's version-2 ids, and an engine without a method must answer
"unsupported". The torch engine covers the core calls end to end.

    python3 python_adapter_test.py ADAPTER_DIR
"""
import sys

sys.path.insert(0, sys.argv[1])
import kvcheck_adapter as kv  # noqa: E402


class PagedEngine:
    """Sequences 100, 101, ... in the engine's own ids."""

    def __init__(self, **storage):
        self.storage, self.next, self.flushed = storage, 100, 0

    def start(self):
        self.next += 1
        return self.next - 1

    def step(self, entries):
        self.last = entries
        return b"\0" * 4 * sum(len(tokens) for _, tokens in entries)

    def reused(self, sequence):
        return 1 if sequence == 100 else 0

    def pool(self):
        return {"block_size": 2, "total": 3, "free": 1, "used": 2, "cached": 0,
                "refcounts": [1, 1, 0], "tables": [{"sequence": 100, "blocks": [0, 1]}]}

    def storage_check(self):
        return "block 2 slot 0 holds 1.5"

    def flush_prefix_cache(self):
        self.flushed += 1

    def length(self, sequence):
        return 0

    def erase(self, sequence, p0, p1):
        self.moved = ("erase", sequence, p0, p1)

    def shift(self, sequence, p0, p1, delta):
        self.moved = ("shift", sequence, p0, p1, delta)

    def div(self, sequence, p0, p1, d):
        self.moved = ("div", sequence, p0, p1, d)

    def offload(self, sequence):
        self.moved = ("offload", sequence)

    def save_state(self, sequence):
        self.moved = ("save", sequence)

    def restore_state(self, sequence):
        self.moved = ("restore", sequence)

    def cache(self, sequence, layer):
        """Two slots holding positions 3 and 4 (a ring or shifted cells)."""
        return b"\0" * 8, b"\0" * 8, [3, 4]


class PlainEngine:
    def start(self):
        return 7

    def step(self, entries):
        return b"\0" * 4 * sum(len(tokens) for _, tokens in entries)

    def length(self, sequence):
        return 1

    def cache(self, sequence, layer):
        return b"\0" * 4, b"\0" * 4


class BrokenEngine:
    """A learner's bugs: an exception deep in step, a KeyError in length."""

    def start(self):
        return 1

    def step(self, entries):
        return self.attention(entries)

    def attention(self, entries):
        raise RuntimeError("shape mismatch")

    def length(self, sequence):
        return {}[sequence]


failures = []


def expect(what, got, want):
    if got != want:
        failures.append("%s: got %r, want %r" % (what, got, want))


def reply_to(server, request):
    try:
        server.handle(request)
    except Exception as e:  # noqa: BLE001
        return kv._error_reply(e)
    return None


def check_errors():
    """An exception in the engine is "internal" with the frames of the
    engine's code (innermost last); a request without a field is "input"."""
    server = kv._Server({"identity": {"name": "broken"}}, lambda *a, **k: BrokenEngine(),
                        load=lambda path: {})
    server.handle({"op": "hello", "protocol": 2})
    server.handle({"op": "load", "path": "m", "model": 1})
    server.handle({"op": "create", "model": 1, "capacity": 8, "max_rows": 2, "kv_dtype": "f32",
                   "engine": 2})
    server.handle({"op": "start", "engine": 2, "sequence": 3})
    error = reply_to(server, {"op": "step", "engine": 2,
                              "entries": [{"sequence": 3, "tokens": [1]}]})["error"]
    expect("step error kind", (error["kind"], error["message"]),
           ("internal", "RuntimeError: shape mismatch"))
    trace = error.get("trace", [])
    expect("innermost frame last", trace[-1:] and trace[-1].split(":", 1)[1],
           "%d in attention: raise RuntimeError(\"shape mismatch\")"
           % (BrokenEngine.attention.__code__.co_firstlineno + 1))
    expect("the caller before it", trace[-2:-1] and trace[-2].split(" in ")[1].split(":")[0],
           "step")
    expect("no frame of the adapter", [f for f in trace if "kvcheck_adapter.py" in f], [])
    error = reply_to(server, {"op": "length", "engine": 2, "sequence": 3})["error"]
    expect("a KeyError in the engine is the engine's", (error["kind"], bool(error.get("trace"))),
           ("internal", True))
    error = reply_to(server, {"op": "step", "engine": 2})["error"]
    expect("a missing field is the request's", (error["kind"], "trace" in error),
           ("input", False))


def main():
    made = []

    def make(model, capacity, max_rows, kv_dtype, **storage):
        made.append(storage)
        return PagedEngine(**storage) if storage else PlainEngine()

    server = kv._Server({"identity": {"name": "stand-in"}}, make, load=lambda path: {"path": path})
    expect("hello", server.handle({"op": "hello", "protocol": 2})[0]["protocol"], 2)
    server.handle({"op": "load", "path": "m", "model": 1})
    server.handle({"op": "create", "model": 1, "capacity": 8, "max_rows": 2, "kv_dtype": "f32",
                   "block_size": 2, "pool_blocks": 3, "prefix_cache": True, "host_blocks": 4,
                   "engine": 5})
    expect("paged create keys", made[-1], {"block_size": 2, "pool_blocks": 3, "prefix_cache": True,
                                           "host_blocks": 4})
    server.handle({"op": "start", "engine": 5, "sequence": 40})
    server.handle({"op": "start", "engine": 5, "sequence": 41})
    reply, payloads = server.handle({"op": "step", "engine": 5, "entries": [
        {"sequence": 40, "tokens": [1, 2]}, {"sequence": 41, "tokens": [3]}]})
    expect("step reused, per entry", reply.get("reused"), [1, 0])
    expect("step logits bytes", len(payloads[0]), 12)
    pool = server.handle({"op": "pool", "engine": 5})[0]
    expect("pool tables name kvcheck's ids", pool["tables"], [{"sequence": 40, "blocks": [0, 1]}])
    expect("pool counts", (pool["total"], pool["free"], pool["used"]), (3, 1, 2))
    expect("storage_check", server.handle({"op": "storage_check", "engine": 5})[0],
           {"problem": "block 2 slot 0 holds 1.5"})
    expect("flush", server.handle({"op": "flush", "engine": 5})[0], {})
    expect("flushed once", server.engines[5].flushed, 1)
    expect("erase", server.handle({"op": "erase", "engine": 5, "sequence": 41, "p0": 1,
                                   "p1": 3})[0], {})
    expect("erase reaches the engine's id", server.engines[5].moved, ("erase", 101, 1, 3))
    expect("shift", server.handle({"op": "shift", "engine": 5, "sequence": 40, "p0": 3,
                                   "p1": 64, "delta": -2})[0], {})
    expect("shift reaches the engine's id", server.engines[5].moved, ("shift", 100, 3, 64, -2))
    expect("div", server.handle({"op": "div", "engine": 5, "sequence": 41, "p0": 0,
                                 "p1": 64, "d": 2})[0], {})
    expect("div reaches the engine's id", server.engines[5].moved, ("div", 101, 0, 64, 2))
    expect("offload", server.handle({"op": "offload", "engine": 5, "sequence": 41})[0], {})
    expect("offload reaches the engine's id", server.engines[5].moved, ("offload", 101))
    expect("save", server.handle({"op": "save", "engine": 5, "sequence": 40})[0], {})
    expect("save reaches the engine's id", server.engines[5].moved, ("save", 100))
    expect("restore", server.handle({"op": "restore", "engine": 5, "sequence": 41})[0], {})
    expect("restore reaches the engine's id", server.engines[5].moved, ("restore", 101))
    reply, payloads = server.handle({"op": "cache", "engine": 5, "sequence": 40, "layer": 0})
    expect("cache positions", (reply.get("positions"), reply["length"]), ([3, 4], 2))
    expect("cache payloads", [len(p) for p in payloads], [8, 8])

    # An engine without the optional methods: no paged keys, no "reused",
    # and "unsupported" for each operation.
    server.handle({"op": "create", "model": 1, "capacity": 8, "max_rows": 2, "kv_dtype": "f32",
                   "engine": 6})
    expect("contiguous create keys", made[-1], {})
    server.handle({"op": "start", "engine": 6, "sequence": 50})
    reply, _ = server.handle({"op": "step", "engine": 6, "entries": [
        {"sequence": 50, "tokens": [1]}]})
    expect("no reused without the method", "reused" in reply, False)
    reply, _ = server.handle({"op": "cache", "engine": 6, "sequence": 50, "layer": 0})
    expect("cache without positions", (reply.get("positions"), reply["length"]), (None, 1))
    for op in ("pool", "storage_check", "flush", "erase", "shift", "div", "offload", "save",
               "restore"):
        try:
            server.handle({"op": op, "engine": 6, "sequence": 50, "p0": 0, "p1": 1,
                           "delta": 1, "d": 2})
            failures.append("%s on an engine without it was not refused" % op)
        except kv.EngineError as e:
            expect(op + " refusal kind", e.kind, "unsupported")

    check_errors()
    for f in failures:
        print("FAIL", f)
    print("python adapter: %d checks failed" % len(failures) if failures else
          "python adapter: every check held")
    return 1 if failures else 0


sys.exit(main())
