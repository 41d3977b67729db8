"""Serve any Python KV-cache engine to kvcheck over the engine protocol (v1 and v2).

docs/ENGINE_PROTOCOL.md specifies the protocol; this module is the whole
server side, standard library only. An engine is any object with

    start() -> int                                   a new sequence id
    start_keyed(cache_key) -> int                    optional ("cache_keys": start, for a
                                                     request whose prefix blocks are shared
                                                     only with the same key)
    step(entries) -> logits                          entries: [(sequence, [token, ...]), ...]
                                                     logits: [sum n][V] float32
    finish(sequence), reset()                        optional (declare in traits)
    abort(sequence)                                  optional ("abort": a request cancelled
                                                     mid-prefill; without it, finish)
    fork(parent, n) -> int                           optional ("fork": a new sequence holding
                                                     the parent's first n tokens)
    truncate(sequence, n)                            optional ("truncate": forget the last n)
    pool() -> dict                                   optional ("pool_report": the "pool" reply,
                                                     {"block_size", "total", "free", "used",
                                                     "cached", "refcounts", "tables"}, and
                                                     with a host tier "host": {"total",
                                                     "free", "used", "cached"})
    storage_check() -> str                           optional ("storage_check": "" when every
                                                     slot no sequence holds is NaN)
    reused(sequence) -> int                          optional ("prefix_cache": leading tokens of
                                                     the sequence's last step taken from the cache)
    flush_prefix_cache()                             optional ("prefix_cache")
    offload(sequence)                                optional ("offload": move the sequence's
                                                     device blocks to the host tier; its next
                                                     step brings them back)
    erase(sequence, p0, p1)                          optional ("erase": remove the cells holding
                                                     positions [p0, p1), leaving a gap)
    shift(sequence, p0, p1, delta)                   optional ("shift": add delta to the positions
                                                     of the cells in [p0, p1), re-rotating keys)
    div(sequence, p0, p1, d)                         optional ("div": positions in [p0, p1)
                                                     become position // d, keys re-rotated)
    save_state(sequence)                             optional ("save_restore": keep a copy of
                                                     the sequence's state, replacing the last)
    restore_state(sequence)                          optional ("save_restore": the sequence
                                                     returns to its last saved state)
    length(sequence) -> int
    cache(sequence, layer) -> (k, v)                 each [length][KVH][D] float32
                        or (k, v, positions)         positions: each slot's absolute position
                                                     (after an erase or shift, or a sliding
                                                     window's ring), or None for slot i at i;
                                                     k and v then hold len(positions) slots

where logits, k and v may be torch tensors, numpy arrays, bytes, or nested
lists of floats. Refusals are raised as EngineError(kind, message) with a kind
from the protocol ("capacity", "rows", "unknown_sequence", "bad_batch",
"bad_token", "device"); any other exception is reported as "internal", with
the last frames of its traceback ("trace": "my_gpt.py:88 in forward: ...",
innermost last), which kvcheck prints with the failure and keeps in the case
file.

    import kvcheck_adapter as kv
    kv.serve(traits={"identity": {"name": "mine", "version": "1"}},
             make_engine=lambda model, capacity, max_rows, kv_dtype: MyEngine(model, capacity))

make_engine receives the model as load_model() returns it: a dict with
"config" (kvcheck's config fields) and "tensors" (Hugging Face name -> tensor).
An engine that declares "paged" or "prefix_cache" also gets, as keyword
arguments, what the create request carries of block_size, pool_blocks,
prefix_cache, prompt_logits and host_blocks (docs/ENGINE_PROTOCOL.md); others
are called as above.
"""

import array
import json
import os
import struct
import sys
import traceback

PROTOCOL_VERSION = 2  # the highest this module speaks; hello agrees on min(kvcheck's, this)
TRACE_FRAMES = 6  # frames of an engine's traceback sent with an "internal" error
MAX_CONTROL_BYTES = 1 << 20
ERROR_KINDS = ("capacity", "rows", "unknown_sequence", "bad_batch", "bad_token", "device",
               "input", "unsupported", "internal")


class EngineError(Exception):
    """A refusal with a protocol error kind; the engine stays usable."""

    def __init__(self, kind, message):
        if kind not in ERROR_KINDS:
            raise ValueError("unknown error kind %r" % (kind,))
        super().__init__(message)
        self.kind = kind


# ---- safetensors -----------------------------------------------------------

def read_safetensors(path, prefer="auto"):
    """name -> tensor from a safetensors file (F32, F16, BF16).

    prefer: "torch", "numpy", "array" or "auto" (torch, else numpy, else
    (array('f'), shape) pairs)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("%s: shorter than the 8-byte header length" % path)
    (n,) = struct.unpack("<Q", data[:8])
    if n > 100_000_000 or 8 + n > len(data):
        raise ValueError("%s: header length %d does not fit the file" % (path, n))
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    kind = _tensor_library(prefer)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = _tensor(kind, bytes(body[begin:end]), info["dtype"], info["shape"], name)
    return out


def _tensor_library(prefer):
    for kind in (("torch", "numpy") if prefer == "auto" else (prefer,)):
        if kind == "array":
            return "array"
        try:
            __import__(kind)
            return kind
        except ImportError:
            if prefer != "auto":
                raise
    return "array"


def _widen_16(raw, dtype):
    halves = array.array("H", raw)
    if sys.byteorder != "little":
        halves.byteswap()
    if dtype == "BF16":
        words = array.array("I", (h << 16 for h in halves))
        return array.array("f", words.tobytes())
    return array.array("f", (struct.unpack("<e", struct.pack("<H", h))[0] for h in halves))


def _tensor(kind, raw, dtype, shape, name):
    if dtype == "F32":
        values = array.array("f", raw)
        if sys.byteorder != "little":
            values.byteswap()
    elif dtype in ("F16", "BF16"):
        values = _widen_16(raw, dtype)
    else:
        raise ValueError("tensor %s: dtype %s (F32, F16 and BF16 are read)" % (name, dtype))
    if kind == "torch":
        import torch
        return torch.frombuffer(bytearray(values.tobytes()), dtype=torch.float32).reshape(shape)
    if kind == "numpy":
        import numpy
        return numpy.frombuffer(values.tobytes(), dtype="<f4").reshape(shape).copy()
    return values, list(shape)


def load_model(folder, prefer="auto"):
    """The folder kvcheck sends with "load": {"config": {...}, "tensors": {...}}."""
    with open(folder + "/config.json") as f:
        config = json.load(f)
    return {"config": config, "tensors": read_safetensors(folder + "/model.safetensors", prefer)}


# ---- framing ----------------------------------------------------------------

def f32_bytes(x):
    """Little-endian float32 bytes of a tensor, array, bytes or nested list."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if hasattr(x, "detach"):  # torch
        import torch
        x = x.detach().to(torch.float32).contiguous().cpu()
        try:
            return x.numpy().astype("<f4", copy=False).tobytes()
        except (RuntimeError, ImportError, TypeError):
            x = x.reshape(-1).tolist()
    elif hasattr(x, "astype"):  # numpy
        return x.astype("<f4").tobytes()
    values = array.array("f", _flatten(x))
    if sys.byteorder != "little":
        values.byteswap()
    return values.tobytes()


def _flatten(x):
    for item in x:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield float(item)


def _read_exact(stream, n):
    chunks, left = [], n
    while left:
        chunk = stream.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _frame(payload):
    return struct.pack("<I", len(payload)) + payload


# ---- the loop ---------------------------------------------------------------

class _Server:
    def __init__(self, traits, make_engine, load):
        self.traits, self.make_engine, self.load = traits, make_engine, load
        self.models, self.engines, self.next_id = {}, {}, 0
        self.version = 1
        self.sequences = {}  # protocol 2: engine id -> {kvcheck's sequence id: the engine's}

    def _new_id(self, request, key):
        """Protocol 2: kvcheck names the id; 1: the server does."""
        if self.version >= 2:
            return request[key]
        self.next_id += 1
        return self.next_id

    def _sequence(self, request, sequence):
        """The engine's id of kvcheck's sequence id (the same in protocol 1)."""
        if self.version < 2:
            return sequence
        ids = self.sequences[request["engine"]]
        if sequence not in ids:
            raise EngineError("unknown_sequence", "no live sequence %r" % (sequence,))
        return ids[sequence]

    def _engine(self, request):
        try:
            return self.engines[request["engine"]]
        except KeyError:
            raise EngineError("input", "unknown engine %r" % (request.get("engine"),))

    def _optional(self, engine, name):
        method = getattr(engine, name, None)
        if method is None:
            raise EngineError("unsupported", "the engine has no %s" % name)
        return method

    def handle(self, r):
        """One request -> (reply dict, [payload bytes, ...])."""
        op = r.get("op")
        if op == "hello":
            self.version = 2 if r.get("protocol", 1) >= 2 else 1
            return {"protocol": self.version, "traits": self.traits}, []
        if op == "load":
            model_id = self._new_id(r, "model")
            self.models[model_id] = self.load(r["path"])
            return {"model": model_id}, []
        if op == "unload":
            self.models.pop(r["model"], None)
            return {}, []
        if op == "create":
            if r["model"] not in self.models:
                raise EngineError("input", "unknown model %r" % (r["model"],))
            storage = {k: r[k] for k in ("block_size", "pool_blocks", "prefix_cache",
                                         "prompt_logits", "host_blocks") if k in r}
            engine = self.make_engine(self.models[r["model"]], r["capacity"], r["max_rows"],
                                      r["kv_dtype"], **storage)
            engine_id = self._new_id(r, "engine")
            self.engines[engine_id] = engine
            self.sequences[engine_id] = {}
            return {"engine": engine_id}, []
        if op == "destroy":
            self.engines.pop(r["engine"], None)
            self.sequences.pop(r["engine"], None)
            return {}, []
        engine = self._engine(r)
        if op == "start":
            key = r.get("cache_key", 0)
            sequence = int(self._optional(engine, "start_keyed")(key) if key else engine.start())
            if self.version < 2:
                return {"sequence": sequence}, []
            self.sequences[r["engine"]][r["sequence"]] = sequence
            return {"sequence": r["sequence"]}, []
        if op == "step":
            entries = [(self._sequence(r, e["sequence"]), e["tokens"]) for e in r["entries"]]
            logits = f32_bytes(engine.step(entries))
            reply = {"payloads": [len(logits)]}
            if hasattr(engine, "reused"):
                reply["reused"] = [int(engine.reused(sequence)) for sequence, _ in entries]
            return reply, [logits]
        if op == "finish" or op == "abort":
            name = "abort" if op == "abort" and hasattr(engine, "abort") else "finish"
            self._optional(engine, name)(self._sequence(r, r["sequence"]))
            if self.version >= 2:
                del self.sequences[r["engine"]][r["sequence"]]
            return {}, []
        if op == "reset":
            self._optional(engine, "reset")()
            if self.version >= 2:
                self.sequences[r["engine"]].clear()
            return {}, []
        if op == "fork":
            child = int(self._optional(engine, "fork")(self._sequence(r, r["parent"]), r["n"]))
            if self.version < 2:
                return {"sequence": child}, []
            self.sequences[r["engine"]][r["sequence"]] = child
            return {"sequence": r["sequence"]}, []
        if op == "truncate":
            self._optional(engine, "truncate")(self._sequence(r, r["sequence"]), r["n"])
            return {}, []
        if op == "pool":
            pool = dict(self._optional(engine, "pool")())
            if self.version >= 2:  # the tables name kvcheck's ids
                ours = {mine: theirs for theirs, mine in self.sequences[r["engine"]].items()}
                pool["tables"] = [dict(t, sequence=ours.get(t["sequence"], t["sequence"]))
                                  for t in pool.get("tables", [])]
            return pool, []
        if op == "storage_check":
            return {"problem": str(self._optional(engine, "storage_check")())}, []
        if op == "flush":
            self._optional(engine, "flush_prefix_cache")()
            return {}, []
        if op == "offload":
            self._optional(engine, "offload")(self._sequence(r, r["sequence"]))
            return {}, []
        if op == "save" or op == "restore":
            self._optional(engine, op + "_state")(self._sequence(r, r["sequence"]))
            return {}, []
        if op == "erase":
            self._optional(engine, "erase")(self._sequence(r, r["sequence"]), r["p0"], r["p1"])
            return {}, []
        if op == "shift":
            self._optional(engine, "shift")(self._sequence(r, r["sequence"]), r["p0"], r["p1"],
                                            r["delta"])
            return {}, []
        if op == "div":
            self._optional(engine, "div")(self._sequence(r, r["sequence"]), r["p0"], r["p1"],
                                          r["d"])
            return {}, []
        if op == "length":
            return {"length": int(engine.length(self._sequence(r, r["sequence"])))}, []
        if op == "cache":
            sequence = self._sequence(r, r["sequence"])
            snapshot = tuple(self._optional(engine, "cache")(sequence, r["layer"]))
            k, v = f32_bytes(snapshot[0]), f32_bytes(snapshot[1])
            positions = snapshot[2] if len(snapshot) > 2 else None
            reply = {"payloads": [len(k), len(v)]}
            if positions is None:
                reply["length"] = int(engine.length(sequence))
            else:
                reply["positions"] = [int(p) for p in positions]
                reply["length"] = len(reply["positions"])
            return reply, [k, v]
        raise EngineError("input", "unknown op %r" % (op,))


_HERE = os.path.abspath(__file__)


def _frames(error):
    """The traceback's frames outside this module, innermost last, each
    "FILE:LINE in FUNCTION: CODE" (FILE relative to the working folder when
    it lies below it)."""
    out = []
    for f in traceback.extract_tb(error.__traceback__):
        path = os.path.abspath(f.filename)
        if path == _HERE:
            continue
        name = os.path.relpath(path)
        out.append("%s:%d in %s: %s" % (path if name.startswith("..") else name, f.lineno,
                                        f.name, (f.line or "").strip()))
    return out


def _error_reply(error):
    """The error reply for an exception the request raised."""
    if isinstance(error, EngineError):
        return {"error": {"kind": error.kind, "message": str(error)}}
    tb = traceback.extract_tb(error.__traceback__)
    if isinstance(error, KeyError) and tb and os.path.abspath(tb[-1].filename) == _HERE:
        # raised reading the request (r["entries"]): a field it lacks
        return {"error": {"kind": "input", "message": "missing field %s" % error}}
    frames = _frames(error)
    # The engine's own failure: a result, not a crash, with its place.
    return {"error": {"kind": "internal", "message": "%s: %s" % (type(error).__name__, error),
                      "trace": frames[-TRACE_FRAMES:]}}


def serve(traits, make_engine, load=load_model):
    """Answers kvcheck's requests on stdin/stdout until end of file or "bye".

    stdout is reserved for frames: print() in the engine goes to stderr."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr
    server = _Server(traits, make_engine, load)
    while True:
        head = _read_exact(inp, 4)
        if head is None:
            return
        (n,) = struct.unpack("<I", head)
        if n > MAX_CONTROL_BYTES:
            raise SystemExit("kvcheck_adapter: a request of %d bytes" % n)
        body = _read_exact(inp, n)
        if body is None:
            return
        request = json.loads(body)
        if request.get("op") == "bye":
            return
        try:
            reply, payloads = server.handle(request)
        except Exception as e:  # noqa: BLE001 (every failure is a reply, never a crash)
            reply, payloads = _error_reply(e), []
        out.write(_frame(json.dumps(reply).encode()) + b"".join(_frame(p) for p in payloads))
        out.flush()
