// llama.cpp (node-llama-cpp's prebuilt CPU binary) served to kvcheck over the
// engine protocol v1 (docs/ENGINE_PROTOCOL.md):
//
//   kvcheck campaign --backend exec:'node adapters/llama.cpp/engine.mjs'
//   kvcheck campaign --backend exec:'node adapters/llama.cpp/engine.mjs --kv f16 --flash-attn on'
//
// Options (part of the backend string, so a case file names the mode):
//   --kv f32|f16|q8_0      K and V cache type (default f32); q8_0 needs --flash-attn on
//   --flash-attn on|off    llama.cpp's flash attention (default off)
//   --export PATH          kvcheck-export binary (default: $KVCHECK_EXPORT, else
//                          build/*/tools/kvcheck-export of this checkout)
//   --declare bitwise      measurement only: claim every invariance bitwise, so
//                          kvcheck's properties show which ones llama.cpp breaks
//   --arithmetic f32       measurement only: declare f32 arithmetic in any mode,
//                          so P1 measures a mode against the f32 bound
//   --raw-k                measurement only: cache snapshots return K as llama.cpp
//                          stores it (adjacent-pair RoPE layout), not un-permuted,
//                          so P6 shows that the permutation matters
//   --state-as-saved       measurement only: snapshot llama.cpp's saved sequence
//                          state without first applying pending stream copies
//                          (shows docs/findings/llama_cpp_state_after_fork_stale.md)
//   --gpt2                 also accept the gpt2 family (its GELU runs through an
//                          f16 table: docs/LLAMA_CPP.md; off by default)
//
// Mapping (docs/LLAMA_CPP.md, "The adapter"):
//   load     the folder's model.safetensors -> GGUF by `kvcheck-export --from`
//            (one GGUF writer, model/gguf.cpp), loaded with gpuLayers 0
//   create   one LlamaContext: `max_rows` context sequences of capacity + 1
//            cells each (node-llama-cpp keeps one cell free) and a spare one
//            (Engine.applyPendingUpdates), one thread, batch size = every
//            cell, context shift refused (never an erase)
//   start    context.getSequence(); finish: sequence.dispose() (llama.cpp
//            removes the sequence's cells); reset: every sequence disposed
//   step     each entry's controlledEvaluate issued before any is awaited, so
//            node-llama-cpp's batch dispatcher decodes them in one llama_decode
//   fork     a new context sequence copies the parent's cells (llama_memory_seq_cp,
//            the whole range) and erases its own from n on (llama_memory_seq_rm):
//            node-llama-cpp's private sequence._copyStateFromOtherSequence (3.22.1)
//   truncate sequence.eraseContextTokenRanges of the last n tokens (llama_memory_seq_rm
//            from position length - n to the end)
//   cache    sequence.saveStateToFile (llama_state_seq_save_file) into the scratch
//            folder, parsed by state_file.mjs: K/V widened to f32, K rows of
//            the llama family un-permuted to kvcheck's rotate-half layout
// Refusals (capacity, rows, unknown sequence, bad batch, bad token) are
// checked before llama.cpp sees the step, so a refused step changes nothing.
// Exit codes: 0 on end of input or "bye", 2 bad options.
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {parseArgs} from "node:util";

import {getLlama, LlamaLogLevel} from "node-llama-cpp";

import {parseSequenceState, snapshotLayer} from "./state_file.mjs";
import {traitsFor} from "./traits.mjs";

const kProtocol = 1;
const kMaxControlBytes = 1 << 20;
const kKvTypes = {f32: "F32", f16: "F16", q8_0: "Q8_0"};
const here = path.dirname(fileURLToPath(import.meta.url));

function usage(message) {
    process.stderr.write(`engine.mjs: ${message}\n`);
    process.exit(2);
}

function parseOptions() {
    let values;
    try {
        ({values} = parseArgs({
            options: {
                "kv": {type: "string", default: "f32"},
                "flash-attn": {type: "string", default: "off"},
                "export": {type: "string"},
                "gpt2": {type: "boolean", default: false},
                "declare": {type: "string", default: "measured"},
                "arithmetic": {type: "string", default: "measured"},
                "raw-k": {type: "boolean", default: false},
                "state-as-saved": {type: "boolean", default: false}
            }
        }));
    } catch (error) {
        usage(error.message);
    }
    if (kKvTypes[values.kv] == null) usage(`--kv: expected f32, f16 or q8_0, got "${values.kv}"`);
    const flash = values["flash-attn"];
    if (flash !== "on" && flash !== "off") usage(`--flash-attn: expected on or off, got "${flash}"`);
    // llama.cpp refuses a quantized V cache without flash attention.
    if (values.kv === "q8_0" && flash !== "on") usage("--kv q8_0 needs --flash-attn on (llama.cpp refuses a quantized V cache without it)");
    if (values.declare !== "measured" && values.declare !== "bitwise")
        usage(`--declare: expected measured or bitwise, got "${values.declare}"`);
    if (values.arithmetic !== "measured" && values.arithmetic !== "f32")
        usage(`--arithmetic: expected measured or f32, got "${values.arithmetic}"`);
    return {kv: values.kv, flashAttention: flash === "on", exportPath: values.export, gpt2: values.gpt2,
            declare: values.declare, arithmetic: values.arithmetic, rawK: values["raw-k"],
            stateAsSaved: values["state-as-saved"]};
}

// kvcheck-export: --export, $KVCHECK_EXPORT, else the newest build of this checkout.
function findExport(given) {
    const candidates = [];
    if (given) candidates.push(given);
    else if (process.env.KVCHECK_EXPORT) candidates.push(process.env.KVCHECK_EXPORT);
    else {
        const build = path.join(here, "..", "..", "build");
        for (const dir of fs.existsSync(build) ? fs.readdirSync(build) : [])
            candidates.push(path.join(build, dir, "tools", "kvcheck-export"));
    }
    const found = candidates.filter((file) => fs.existsSync(file))
        .sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs);
    if (found.length === 0)
        usage(`no kvcheck-export found (looked at ${candidates.join(", ") || "build/*/tools"}); build it or pass --export PATH`);
    return found[0];
}

// What the cache snapshot needs of a model, from the GGUF that kvcheck-export
// wrote (model/gguf.cpp): layers, K/V heads, head size, and whether K rows are
// permuted per head (the llama family, docs/WEIGHTS.md).
function kvShape(metadata) {
    const arch = metadata.general.architecture;
    const m = metadata[arch];
    const heads = m.attention.head_count;
    const headDim = m.attention.key_length ?? m.embedding_length / heads;
    return {layers: m.block_count, kvHeads: m.attention.head_count_kv ?? heads, headDim, permutedK: arch === "llama"};
}

class EngineError extends Error {
    constructor(kind, message) {
        super(message);
        this.kind = kind;
    }
}

// ---- framing ---------------------------------------------------------------

// Length-prefixed frames from stdin; read(n) resolves to n bytes or null at end of input.
class FrameReader {
    constructor(stream) {
        this.chunks = [];
        this.size = 0;
        this.ended = false;
        this.waiter = null;
        stream.on("data", (chunk) => {
            this.chunks.push(chunk);
            this.size += chunk.length;
            this.wake();
        });
        stream.on("end", () => {
            this.ended = true;
            this.wake();
        });
    }

    wake() {
        const waiter = this.waiter;
        this.waiter = null;
        if (waiter) waiter();
    }

    async read(n) {
        while (this.size < n) {
            if (this.ended) return null;
            await new Promise((resolve) => (this.waiter = resolve));
        }
        const all = Buffer.concat(this.chunks);
        this.chunks = [all.subarray(n)];
        this.size = all.length - n;
        return all.subarray(0, n);
    }

    async frame(limit) {
        const head = await this.read(4);
        if (head == null) return null;
        const n = head.readUInt32LE(0);
        if (n > limit) throw new Error(`a request frame of ${n} bytes (at most ${limit})`);
        return this.read(n);
    }
}

function frame(bytes) {
    const head = Buffer.alloc(4);
    head.writeUInt32LE(bytes.length, 0);
    return [head, bytes];
}

// ---- engines ---------------------------------------------------------------

function refuseContextShift() {
    throw new Error("context shift is disabled: the sequence outgrew its capacity");
}

class Engine {
    constructor(context, model, capacity, maxRows, {kv, rawK, stateAsSaved}) {
        this.context = context;      // LlamaContext: maxRows sequences of capacity + 1 cells
        this.model = model;          // {model, vocab, shape}
        this.kv = kv;                // "f32" | "f16" | "q8_0": the cache's ggml type
        this.rawK = rawK;            // --raw-k (measurement only): K as llama.cpp stores it
        this.stateAsSaved = stateAsSaved;  // --state-as-saved: no update before a snapshot
        this.spare = context.getSequence({contextShift: {strategy: refuseContextShift}});  // one cell, for applyPendingUpdates
        this.snapshots = new Map();  // protocol id -> {generation, parsed state file}
        this.sinceDecode = false;    // a call since the last decode (llama.cpp updates may be pending)
        this.capacity = capacity;    // tokens per sequence
        this.maxRows = maxRows;
        this.sequences = new Map();  // protocol id -> LlamaContextSequence
    }

    start(newId) {
        if (this.sequences.size >= this.maxRows)
            throw new EngineError("rows", `all ${this.maxRows} rows are taken`);
        const sequence = this.context.getSequence({contextShift: {strategy: refuseContextShift}});
        const id = newId();
        this.sequences.set(id, sequence);
        return id;
    }

    sequence(id) {
        const sequence = this.sequences.get(id);
        if (sequence == null) throw new EngineError("unknown_sequence", `no live sequence ${id}`);
        return sequence;
    }

    // Every refusal before llama.cpp sees anything, so a refused step changes nothing.
    validate(entries) {
        if (!Array.isArray(entries) || entries.length === 0) throw new EngineError("bad_batch", "a step without entries");
        const seen = new Set();
        for (const entry of entries) {
            const sequence = this.sequence(entry.sequence);
            if (seen.has(entry.sequence)) throw new EngineError("bad_batch", `sequence ${entry.sequence} twice in one step`);
            seen.add(entry.sequence);
            if (!Array.isArray(entry.tokens) || entry.tokens.length === 0)
                throw new EngineError("bad_batch", `an empty chunk for sequence ${entry.sequence}`);
            for (const token of entry.tokens) {
                if (!Number.isInteger(token) || token < 0 || token >= this.model.vocab)
                    throw new EngineError("bad_token", `token ${token} outside [0, ${this.model.vocab})`);
            }
            const held = sequence.nextTokenIndex;
            if (held + entry.tokens.length > this.capacity)
                throw new EngineError("capacity", `sequence ${entry.sequence} has ${held} of ${this.capacity} positions, the step adds ${entry.tokens.length}`);
        }
    }

    // Logits [sum n][V] f32, entries in request order.
    async step(entries) {
        this.validate(entries);
        const vocab = this.model.vocab;
        // All evaluations are queued before the first await: node-llama-cpp's
        // dispatcher then decodes them together (one llama_decode while they fit
        // the batch, which holds every cell).
        const pending = entries.map((entry) => this.sequence(entry.sequence).controlledEvaluate(
            entry.tokens.map((token) => [token, {generateNext: {logits: true}}])));
        const results = await Promise.all(pending);
        this.sinceDecode = false;  // the decode ran llama.cpp's queued updates
        const total = entries.reduce((n, entry) => n + entry.tokens.length, 0);
        const out = new Float32Array(total * vocab);  // [N][V]
        let row = 0;
        results.forEach((result, e) => {
            for (let k = 0; k < entries[e].tokens.length; ++k, ++row) {
                const logits = result[k]?.next?.logits;
                if (logits == null || logits.size !== vocab)
                    throw new Error(`sequence ${entries[e].sequence} token ${k}: ${logits?.size} logits, expected ${vocab}`);
                for (const [token, value] of logits) out[row * vocab + token] = value;
            }
        });
        return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    }

    // A fresh context sequence holding the parent's first n tokens: llama.cpp
    // copies the parent's cells into it (llama_memory_seq_cp; with a unified
    // cache the cells are shared, not duplicated) and removes its cells from
    // position n on (llama_memory_seq_rm). node-llama-cpp 3.22.1 does both in
    // its private _copyStateFromOtherSequence, which also copies the token
    // list that positions the next step.
    async fork(parentId, n, newId) {
        const parent = this.sequence(parentId);
        const length = parent.nextTokenIndex;
        if (!Number.isInteger(n) || n < 0 || n > length)
            throw new EngineError("bad_batch", `fork of ${n} tokens from sequence ${parentId} of ${length}`);
        if (this.sequences.size >= this.maxRows)
            throw new EngineError("rows", `all ${this.maxRows} rows are taken`);
        if (typeof parent._copyStateFromOtherSequence !== "function")
            throw new EngineError("unsupported", "fork: node-llama-cpp has no sequence._copyStateFromOtherSequence (not 3.22.1?)");
        const child = this.context.getSequence({contextShift: {strategy: refuseContextShift}});
        // A fork of 0 tokens holds nothing: a fresh sequence is exactly that.
        // (node-llama-cpp's copy reports failure for a parent with no tokens,
        // docs/LLAMA_CPP.md "Fork and truncate".)
        if (n === 0) {
            const id = newId();
            this.sequences.set(id, child);
            return id;
        }
        const copied = await child._copyStateFromOtherSequence(parent, n);
        if (!copied || child.nextTokenIndex !== n) {
            const held = child.nextTokenIndex;
            await child.dispose();
            throw new Error(`fork: node-llama-cpp's copy left ${held} tokens where ${n} were asked (copy ${copied ? "succeeded" : "failed"})`);
        }
        const id = newId();
        this.sequences.set(id, child);
        return id;
    }

    // Forgets the last n tokens: llama_memory_seq_rm(seq, length - n, -1)
    // through eraseContextTokenRanges, which also shortens the token list.
    async truncate(id, n) {
        const sequence = this.sequence(id);
        const length = sequence.nextTokenIndex;
        if (!Number.isInteger(n) || n < 0 || n > length)
            throw new EngineError("bad_batch", `truncate of ${n} tokens from sequence ${id} of ${length}`);
        if (n > 0) await sequence.eraseContextTokenRanges([{start: length - n, end: length}]);
        if (sequence.nextTokenIndex !== length - n)
            throw new Error(`truncate: node-llama-cpp left ${sequence.nextTokenIndex} tokens where ${length - n} were asked`);
    }

    // The stored K/V of one layer (docs/LLAMA_CPP.md, "K/V snapshot (P6)").
    // One state file per sequence and generation (any call but cache and
    // length starts a new one) serves every layer's request.
    async cache(id, layer, generation, scratch) {
        const sequence = this.sequence(id);
        const {shape} = this.model;
        if (!Number.isInteger(layer) || layer < 0 || layer >= shape.layers)
            throw new EngineError("input", `cache: layer ${layer} of ${shape.layers}`);
        let memo = this.snapshots.get(id);
        if (memo?.generation !== generation) {
            if (this.sinceDecode && !this.stateAsSaved) {
                await this.applyPendingUpdates();
                this.sinceDecode = false;
            }
            const file = path.join(scratch, `state-${id}.bin`);
            await sequence.saveStateToFile(file);
            const bytes = fs.readFileSync(file);
            fs.rmSync(file, {force: true});
            const state = parseSequenceState(bytes, {layers: shape.layers, width: shape.kvHeads * shape.headDim,
                                                     type: this.kv, seqId: sequence._sequenceId});
            if (state.positions.length !== sequence.nextTokenIndex)
                throw new Error(`cache: llama.cpp's state holds ${state.positions.length} cells, the sequence ${sequence.nextTokenIndex} tokens`);
            memo = {generation, state};
            this.snapshots.set(id, memo);
        }
        return snapshotLayer(memo.state, layer, {kvHeads: shape.kvHeads, headDim: shape.headDim,
                                                 permuted: shape.permutedK && !this.rawK});
    }

    // llama.cpp applies a fork's stream copy (and a K shift) only at the
    // start of the next llama_decode, and llama_state_seq_save_file writes
    // the buffers as they are: without a decode in between, a forked
    // sequence's state holds its stream's old K/V (zeros) - finding
    // docs/findings/llama_cpp_state_after_fork_stale.md. One token decoded in
    // the spare sequence (its own stream) runs that update; its cell is
    // removed again, no sequence under test is touched.
    async applyPendingUpdates() {
        await this.spare.controlledEvaluate([[0, {}]]);
        await this.spare.clearHistory();
    }

    async finish(id) {
        const sequence = this.sequence(id);
        this.sequences.delete(id);
        await sequence.dispose();
    }

    async reset() {
        const all = [...this.sequences.values()];
        this.sequences.clear();
        for (const sequence of all) await sequence.dispose();
    }

    async destroy() {
        await this.reset();
        await this.context.dispose();
    }
}

// Diagnosis only (docs/LLAMA_CPP.md, "One decode per step"): counts
// llama_decode calls through node-llama-cpp's private `_ctx.decodeBatch`
// (3.22.1) and prints the count after each step's decodes on stderr.
function countDecodes(context) {
    const native = context._ctx;
    if (typeof native?.decodeBatch !== "function")
        throw new Error("KVCHECK_LLAMA_COUNT_DECODES: node-llama-cpp has no _ctx.decodeBatch (not 3.22.1?)");
    const decode = async (...args) => {
        process.stderr.write("engine.mjs: llama_decode\n");
        return native.decodeBatch(...args);
    };
    // The native object is frozen: a proxy in its place.
    context._ctx = new Proxy(native, {
        get: (target, key) => key === "decodeBatch" ? decode
            : typeof target[key] === "function" ? target[key].bind(target) : target[key]
    });
}

class Server {
    constructor(options, llama, exporter) {
        this.options = options;
        this.llama = llama;  // Promise<Llama>
        this.exporter = exporter;
        this.scratch = fs.mkdtempSync(path.join(os.tmpdir(), "kvcheck-llama-"));
        this.models = new Map();   // id -> {model, vocab}
        this.engines = new Map();  // id -> Engine
        this.nextId = 0;
        this.generation = 0;       // counts calls that may change a cache (cache snapshots' memo)
    }

    newId() {
        return ++this.nextId;
    }

    engine(request) {
        const engine = this.engines.get(request.engine);
        if (engine == null) throw new EngineError("input", `unknown engine ${request.engine}`);
        return engine;
    }

    async load(folder) {
        if (typeof folder !== "string") throw new EngineError("input", "load: path is not a string");
        const id = this.newId();
        const gguf = path.join(this.scratch, `model-${id}.gguf`);
        try {
            execFileSync(this.exporter, ["--from", path.join(folder, "model.safetensors"), "--out", gguf],
                {stdio: ["ignore", "ignore", "pipe"]});
        } catch (error) {
            throw new Error(`kvcheck-export --from ${folder}/model.safetensors failed: ${error.stderr ?? error.message}`);
        }
        const model = await (await this.llama).loadModel({modelPath: gguf, gpuLayers: 0});
        const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
        fs.rmSync(gguf, {force: true});  // loaded into memory (no mmap needed afterwards)
        this.models.set(id, {model, vocab, shape: kvShape(model.fileInfo.metadata)});
        return id;
    }

    async create(request) {
        const model = this.models.get(request.model);
        if (model == null) throw new EngineError("input", `unknown model ${request.model}`);
        const {capacity, max_rows: maxRows} = request;
        if (!Number.isInteger(capacity) || capacity < 1) throw new EngineError("input", `capacity ${capacity}`);
        if (!Number.isInteger(maxRows) || maxRows < 1) throw new EngineError("input", `max_rows ${maxRows}`);
        if (request.kv_dtype !== this.options.kv)
            throw new EngineError("input", `kv_dtype ${request.kv_dtype}: this adapter runs --kv ${this.options.kv}`);
        const type = kKvTypes[this.options.kv];
        const context = await model.model.createContext({
            contextSize: capacity + 1,
            sequences: maxRows + 1,  // and the spare (Engine.applyPendingUpdates)
            batchSize: (capacity + 1) * maxRows,
            threads: 1,
            flashAttention: this.options.flashAttention,
            experimentalKvCacheKeyType: type,
            experimentalKvCacheValueType: type
        });
        if (process.env.KVCHECK_LLAMA_COUNT_DECODES) countDecodes(context);
        const id = this.newId();
        this.engines.set(id, new Engine(context, model, capacity, maxRows, this.options));
        return id;
    }

    // One request -> [reply, payloads].
    async handle(r) {
        if (r.op !== "cache" && r.op !== "length") ++this.generation;  // a call that may change a cache
        const target = this.engines.get(r.engine);
        if (target && r.op !== "cache" && r.op !== "length") target.sinceDecode = true;  // until a decode
        switch (r.op) {
            case "hello":
                return [{protocol: kProtocol, traits: traitsFor(this.options)}, []];
            case "load":
                return [{model: await this.load(r.path)}, []];
            case "unload": {
                const model = this.models.get(r.model);
                this.models.delete(r.model);
                if (model) await model.model.dispose();
                return [{}, []];
            }
            case "create":
                return [{engine: await this.create(r)}, []];
            case "destroy": {
                const engine = this.engines.get(r.engine);
                this.engines.delete(r.engine);
                if (engine) await engine.destroy();
                return [{}, []];
            }
            case "start":
                return [{sequence: this.engine(r).start(() => this.newId())}, []];
            case "step": {
                const logits = await this.engine(r).step(r.entries);
                return [{payloads: [logits.length]}, [logits]];
            }
            case "fork":
                return [{sequence: await this.engine(r).fork(r.parent, r.n, () => this.newId())}, []];
            case "truncate":
                await this.engine(r).truncate(r.sequence, r.n);
                return [{}, []];
            case "finish":
                await this.engine(r).finish(r.sequence);
                return [{}, []];
            case "reset":
                await this.engine(r).reset();
                return [{}, []];
            case "length":
                return [{length: this.engine(r).sequence(r.sequence).nextTokenIndex}, []];
            case "cache": {
                const {length, k, v} = await this.engine(r).cache(r.sequence, r.layer, this.generation, this.scratch);
                return [{length, payloads: [k.byteLength, v.byteLength]},
                        [Buffer.from(k.buffer, k.byteOffset, k.byteLength), Buffer.from(v.buffer, v.byteOffset, v.byteLength)]];
            }
            default:
                throw new EngineError("input", `unknown op ${JSON.stringify(r.op)}`);
        }
    }
}

async function main() {
    const options = parseOptions();
    const exporter = findExport(options.exportPath);
    // Nothing compiled or downloaded at run time; CPU only. Started here and
    // awaited at the first load, so that hello is answered at once (on a busy
    // machine node-llama-cpp's start took more than kvcheck's 30 s per call).
    const llama = getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
    llama.catch(() => {});  // reported by the load that awaits it
    const server = new Server(options, llama, exporter);
    const reader = new FrameReader(process.stdin);
    try {
        for (;;) {
            const body = await reader.frame(kMaxControlBytes);
            if (body == null) break;
            let request;
            try {
                request = JSON.parse(body.toString("utf8"));
            } catch (error) {
                throw new Error(`a request that is not JSON: ${error.message}`);
            }
            if (request?.op === "bye") break;
            let reply, payloads;
            try {
                [reply, payloads] = await server.handle(request);
            } catch (error) {
                const kind = error instanceof EngineError ? error.kind : "internal";
                reply = {error: {kind, message: error instanceof EngineError ? error.message : String(error?.stack ?? error)}};
                payloads = [];
            }
            const parts = frame(Buffer.from(JSON.stringify(reply)));
            for (const payload of payloads) parts.push(...frame(payload));
            process.stdout.write(Buffer.concat(parts));
        }
    } finally {
        fs.rmSync(server.scratch, {recursive: true, force: true});
    }
    process.exit(0);
}

main().catch((error) => {
    process.stderr.write(`engine.mjs: ${error?.stack ?? error}\n`);
    process.exit(1);
});
