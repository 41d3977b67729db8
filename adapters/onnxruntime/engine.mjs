// ONNX Runtime's GroupQueryAttention (onnxruntime-node's CPU build), the
// operator onnxruntime-genai runs, served to kvcheck over the engine
// protocol v2 (docs/ENGINE_PROTOCOL.md, docs/ONNXRUNTIME.md):
//
//   kvcheck campaign --backend exec:'node adapters/onnxruntime/engine.mjs'
//
// Options (part of the backend string, so a case file names the mode):
//   --export PATH        kvcheck-export binary (default: $KVCHECK_EXPORT, which
//                        kvcheck sets to the kvcheck-export beside itself)
//   --calls grouped|separate|one
//                        grouped (default): a step's sequences share operator
//                        calls where the kernel computes them right
//                        (gqa_model.mjs planCalls); separate: one call per
//                        sequence; one (measurement only): the whole step in
//                        one call wherever the operator accepts it
//                        (docs/findings/onnxruntime_gqa_mixed_batch_first_prompt.md)
//   --buffer separate|shared
//                        separate (default): past tensors as long as the
//                        longest past, present allocated by ONNX Runtime;
//                        shared: one [B][KVH][capacity][D] tensor per layer
//                        bound as both past and present (past_present_share_buffer)
//   --qkv separate|packed
//                        separate (default): query, key and value inputs;
//                        packed: one Q|K|V projection into `query` (the
//                        operator's packed path; kvcheck-export --packed-qkv)
//   --window on|off      declare sliding windows (local_window_size; default on)
//   --gpt2               also accept the gpt2 family (no rotary, FastGelu)
//   --threads N          ONNX Runtime intra-op threads (default 1)
//   --optimization LEVEL graph optimization: disabled|basic|extended|all (default all)
//   --declare bitwise    measurement only: claim every invariance bitwise
//
// Mapping (docs/ONNXRUNTIME.md, "The adapter"):
//   load     model.safetensors -> ONNX by `kvcheck-export --from` (one ONNX
//            writer, model/onnx_model.cpp), one InferenceSession per model,
//            kept until unload (every engine on the model shares it)
//   create   per sequence and layer a K and a V buffer [KVH][capacity][D]: the
//            cache between calls, fed as past_key/past_value and replaced by
//            the operator's present_key/present_value after every call
//   step     each group of planCalls is one session.run: seqlens_k = past + n - 1
//            per row, total_sequence_length the group's largest past + n
//   finish   the sequence's buffers dropped; reset: every sequence dropped
//   cache    the buffers as the operator last wrote them ([n][KVH][D])
// Diagnosis: with KVCHECK_ORT_TIMING=FILE, the adapter writes at exit, as one
// JSON object, each request kind's count and milliseconds, `load` split into
// `export` (kvcheck-export) and `session` (InferenceSession.create), and
// `run` (session.run calls) inside `step` (docs/PERFORMANCE.md).
// Refusals (capacity, rows, unknown sequence, bad batch, bad token) are
// decided before ONNX Runtime sees the step, so a refused step changes nothing.
// Exit codes: 0 on end of input or "bye", 2 bad options.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {parseArgs} from "node:util";

import {checkStepEntries, EngineError, findExport, Ids, serve} from "../node-protocol/protocol.mjs";
import {exportOnnx, GqaModel, planCalls, readConfig} from "./gqa_model.mjs";
import {traitsFor} from "./traits.mjs";

// Per kind {count, ms}; filled only with KVCHECK_ORT_TIMING set.
const timing = {};
const timed = process.env.KVCHECK_ORT_TIMING ? async (kind, work) => {
    const start = performance.now();
    try {
        return await work();
    } finally {
        const entry = (timing[kind] ??= {count: 0, ms: 0});
        entry.count += 1;
        entry.ms += performance.now() - start;
    }
} : (kind, work) => work();
const kLevels = ["disabled", "basic", "extended", "all"];

function usage(message) {
    process.stderr.write(`engine.mjs: ${message}\n`);
    process.exit(2);
}

function choice(name, value, allowed) {
    if (!allowed.includes(value)) usage(`--${name}: expected ${allowed.join(" or ")}, got "${value}"`);
    return value;
}

function parseOptions() {
    let values;
    try {
        ({values} = parseArgs({options: {
            "export": {type: "string"}, "calls": {type: "string", default: "grouped"},
            "buffer": {type: "string", default: "separate"}, "qkv": {type: "string", default: "separate"},
            "window": {type: "string", default: "on"}, "gpt2": {type: "boolean", default: false},
            "threads": {type: "string", default: "1"}, "optimization": {type: "string", default: "all"},
            "declare": {type: "string", default: "measured"}
        }}));
    } catch (error) {
        usage(error.message);
    }
    if (!/^[1-9]\d*$/.test(values.threads)) usage(`--threads: expected a positive integer, got "${values.threads}"`);
    return {exportPath: values.export, calls: choice("calls", values.calls, ["grouped", "separate", "one"]),
            buffer: choice("buffer", values.buffer, ["separate", "shared"]),
            packed: choice("qkv", values.qkv, ["separate", "packed"]) === "packed",
            window: choice("window", values.window, ["on", "off"]) === "on", gpt2: values.gpt2,
            threads: Number(values.threads), optimization: choice("optimization", values.optimization, kLevels),
            declare: choice("declare", values.declare, ["measured", "bitwise"])};
}

class Engine {
    constructor(model, capacity, maxRows, {calls, buffer}) {
        this.model = model;          // GqaModel
        this.capacity = capacity;    // positions per sequence
        this.maxRows = maxRows;
        this.calls = calls;          // "grouped" | "separate" | "one"
        this.buffer = buffer;        // "separate" | "shared"
        this.sequences = new Map();  // protocol id -> {length, k: [L] [KVH][cap][D], v: likewise}
    }

    start(id) {
        if (this.sequences.size >= this.maxRows) throw new EngineError("rows", `all ${this.maxRows} rows are taken`);
        const {n_layers: layers, n_kv_heads: kvh, head_dim: d} = this.model.config;
        const size = kvh * this.capacity * d;
        const sequence = {length: 0, k: [], v: []};
        for (let l = 0; l < layers; ++l) {
            sequence.k.push(new Float32Array(size));
            sequence.v.push(new Float32Array(size));
        }
        this.sequences.set(id, sequence);
        return id;
    }

    sequence(id) {
        const sequence = this.sequences.get(id);
        if (sequence == null) throw new EngineError("unknown_sequence", `no live sequence ${id}`);
        return sequence;
    }

    // Every refusal before ONNX Runtime sees anything, so a refused step changes nothing.
    validate(entries) {
        const {vocab, max_pos: maxPos} = this.model.config;
        checkStepEntries(entries, (id) => this.sequence(id), vocab);
        for (const entry of entries) {
            const sequence = this.sequence(entry.sequence);
            const after = sequence.length + entry.tokens.length;
            if (after > this.capacity)
                throw new EngineError("capacity", `sequence ${entry.sequence} has ${sequence.length} of ${this.capacity} positions, the step adds ${entry.tokens.length}`);
            if (after > maxPos)
                throw new EngineError("capacity", `sequence ${entry.sequence}: ${after} positions pass max_pos ${maxPos}`);
        }
    }

    // Logits [sum n][V] f32, entries in request order.
    async step(entries) {
        this.validate(entries);
        const rows = entries.map((entry) => {
            const sequence = this.sequence(entry.sequence);
            return {tokens: entry.tokens, past: sequence.length, n: entry.tokens.length, k: sequence.k, v: sequence.v};
        });
        const logits = new Array(rows.length);
        let plan = planCalls(rows, this.calls);
        if (this.calls === "one" && rows.length > 1) {
            try {
                plan = [];
                const out = await this.model.run(rows, this.capacity, this.buffer);
                out.forEach((rowLogits, i) => (logits[i] = rowLogits));
            } catch (error) {
                // The operator's input check refused the batch; nothing was written back.
                if (!/batch_size must be 1/.test(String(error?.message))) throw error;
                plan = planCalls(rows, "grouped");
            }
        }
        for (const group of plan) {
            const out = await timed("run", () => this.model.run(group.map((i) => rows[i]), this.capacity, this.buffer));
            group.forEach((i, j) => (logits[i] = out[j]));
        }
        entries.forEach((entry) => (this.sequence(entry.sequence).length += entry.tokens.length));
        const total = logits.reduce((n, rowLogits) => n + rowLogits.length, 0);
        const flat = new Float32Array(total);  // [N][V]
        let at = 0;
        for (const rowLogits of logits) {
            flat.set(rowLogits, at);
            at += rowLogits.length;
        }
        return Buffer.from(flat.buffer, flat.byteOffset, flat.byteLength);
    }

    // Layer l's stored K/V as [n][KVH][D] (the operator's [KVH][n][D] transposed).
    cache(id, layer) {
        const sequence = this.sequence(id);
        const {n_layers: layers, n_kv_heads: kvh, head_dim: d} = this.model.config;
        if (!Number.isInteger(layer) || layer < 0 || layer >= layers)
            throw new EngineError("input", `cache: layer ${layer} of ${layers}`);
        const n = sequence.length;
        const k = new Float32Array(n * kvh * d), v = new Float32Array(n * kvh * d);  // [n][KVH][D]
        for (let p = 0; p < n; ++p) {
            for (let h = 0; h < kvh; ++h) {
                const from = (h * this.capacity + p) * d, to = (p * kvh + h) * d;
                k.set(sequence.k[layer].subarray(from, from + d), to);
                v.set(sequence.v[layer].subarray(from, from + d), to);
            }
        }
        return {length: n, k, v};
    }
}

class Server {
    constructor(options, exporter) {
        this.options = options;
        this.exporter = exporter;
        this.scratch = fs.mkdtempSync(path.join(os.tmpdir(), "kvcheck-onnxruntime-"));
        this.ids = new Ids();      // model, engine and sequence ids (kvcheck's in version 2)
        this.models = new Map();   // id -> GqaModel
        this.engines = new Map();  // id -> Engine
    }

    engine(request) {
        const engine = this.engines.get(request.engine);
        if (engine == null) throw new EngineError("input", `unknown engine ${request.engine}`);
        return engine;
    }

    async load(request) {
        if (typeof request.path !== "string") throw new EngineError("input", "load: path is not a string");
        const id = this.ids.of(request, "model");
        const config = readConfig(request.path);
        const file = path.join(this.scratch, `model-${id}.onnx`);
        await timed("export", () => exportOnnx(this.exporter, request.path, file, this.options.packed));
        try {
            this.models.set(id, await timed("session", () => GqaModel.open(file, config, this.options)));
        } finally {
            fs.rmSync(file, {force: true});  // the session holds the graph in memory
        }
        return id;
    }

    create(request) {
        const model = this.models.get(request.model);
        if (model == null) throw new EngineError("input", `unknown model ${request.model}`);
        const {capacity, max_rows: maxRows} = request;
        if (!Number.isInteger(capacity) || capacity < 1) throw new EngineError("input", `capacity ${capacity}`);
        if (!Number.isInteger(maxRows) || maxRows < 1) throw new EngineError("input", `max_rows ${maxRows}`);
        if (request.kv_dtype !== "f32") throw new EngineError("input", `kv_dtype ${request.kv_dtype}: this adapter runs f32 K/V`);
        const id = this.ids.of(request, "engine");
        this.engines.set(id, new Engine(model, capacity, maxRows, this.options));
        return id;
    }

    // One request -> [reply, payloads].
    async handle(r) {
        switch (r.op) {
            case "hello":
                return [{protocol: this.ids.agree(r), traits: traitsFor(this.options)}, []];
            case "load":
                return [{model: await this.load(r)}, []];
            case "unload": {
                const model = this.models.get(r.model);
                this.models.delete(r.model);
                if (model) await model.session.release();
                return [{}, []];
            }
            case "create":
                return [{engine: this.create(r)}, []];
            case "destroy":
                this.engines.delete(r.engine);
                return [{}, []];
            case "start":
                return [{sequence: this.engine(r).start(this.ids.of(r, "sequence"))}, []];
            case "step": {
                const logits = await this.engine(r).step(r.entries);
                return [{payloads: [logits.length]}, [logits]];
            }
            case "finish":
                this.engine(r).sequence(r.sequence);
                this.engine(r).sequences.delete(r.sequence);
                return [{}, []];
            case "reset":
                this.engine(r).sequences.clear();
                return [{}, []];
            case "length":
                return [{length: this.engine(r).sequence(r.sequence).length}, []];
            case "cache": {
                const {length, k, v} = this.engine(r).cache(r.sequence, r.layer);
                return [{length, payloads: [k.byteLength, v.byteLength]},
                        [Buffer.from(k.buffer, k.byteOffset, k.byteLength), Buffer.from(v.buffer, v.byteOffset, v.byteLength)]];
            }
            default:
                throw new EngineError(r.op in kOptional ? "unsupported" : "input", `${kOptional[r.op] ?? "unknown op"} ${JSON.stringify(r.op)}`);
        }
    }
}

// Operations of the protocol this adapter does not offer (traits say so).
const kOptional = {fork: "not offered:", truncate: "not offered:", erase: "not offered:", shift: "not offered:",
                   pool: "not offered:", storage_check: "not offered:", flush: "not offered:", abort: "not offered:"};

async function main() {
    const options = parseOptions();
    const {file: exporter, problem} = findExport(options.exportPath);
    if (problem) usage(problem);
    const server = new Server(options, exporter);
    try {
        await serve(process.stdin, process.stdout, (request) => timed(String(request?.op), () => server.handle(request)));
    } finally {
        fs.rmSync(server.scratch, {recursive: true, force: true});
        if (process.env.KVCHECK_ORT_TIMING) fs.writeFileSync(process.env.KVCHECK_ORT_TIMING, JSON.stringify(timing) + "\n");
    }
    process.exit(0);
}

main().catch((error) => {
    process.stderr.write(`engine.mjs: ${error?.stack ?? error}\n`);
    process.exit(1);
});
