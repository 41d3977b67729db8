// What the adapter keeps between kvcheck's requests so that a model and its
// contexts are not made anew for every case (docs/PERFORMANCE.md, llama.cpp):
// the GGUF files kvcheck-export wrote, by the content of the safetensors they
// came from, and the contexts of destroyed engines, reset (every sequence
// removed, queued llama.cpp updates applied) and parked per model for the
// next create of the same shape. kvcheck keeps a bounded set of models
// loaded (backends/exec/exec_session.h); what it unloads, this disposes.
import {createHash} from "node:crypto";
import fs from "node:fs";
import path from "node:path";

import {Exporter} from "./exporter.mjs";

const kMaxGgufFiles = 64;      // converted models kept on disk (a few KB to MB each)
const kMaxParkedPerModel = 2;  // contexts kept per loaded model (1 of a long context)

// A context's shape, rounded so that the cases of one model share contexts:
// at least 8 sequences (and the spare), a batch of at least 512 tokens. A
// step still fits one batch (the adapter refuses one past capacity), and
// node-llama-cpp's own limits are never reached before the adapter's.
// Rounded only where a sequence's context fits llama.cpp's smallest
// allocation (256 cells: the generators' models); a checkpoint with a long
// context keeps the shape asked for, since each sequence is a KV stream of
// its own (kv_unified = false) and extra ones would cost their full size.
const kRoundedContextSize = 256;
// node-llama-cpp estimates a model's and a context's memory before it loads
// or creates them (a third of loadModel's time for the generators' models,
// measured: 6.8 -> 5.0 ms, createContext 4.4 -> 3.4 ms); a GGUF this small
// cannot need more memory than the machine has, so it skips the estimate.
const kSmallModelBytes = 64 << 20;
export function contextShape(capacity, maxRows, maxPos) {
    const contextSize = Math.max(capacity, maxPos) + 1;
    const exact = {contextSize, sequences: maxRows + 1, batchSize: (capacity + 1) * maxRows};
    if (contextSize > kRoundedContextSize) return exact;
    return {contextSize, sequences: Math.max(exact.sequences, 9), batchSize: Math.max(exact.batchSize, 512)};
}

export class ModelStore {
    constructor(scratch, exporter, llama) {
        this.scratch = scratch;    // the adapter's scratch folder
        this.exporter = new Exporter(exporter, scratch);  // kvcheck-export
        this.llama = llama;        // Promise<Llama>
        this.ggufs = new Map();    // sha256 of model.safetensors -> GGUF path, oldest first
        this.converted = 0;        // GGUF files written (their names)
        this.times = new Map();    // what -> {count, ms}: KVCHECK_LLAMA_TIMES (diagnosis)
    }

    // Diagnosis only: with KVCHECK_LLAMA_TIMES=FILE, the milliseconds spent
    // per request kind and in the load's parts, written to FILE at exit as
    // one JSON object (docs/PERFORMANCE.md, where a llama.cpp case's time goes).
    time(what, ms) {
        if (!process.env.KVCHECK_LLAMA_TIMES) return;
        const entry = this.times.get(what) ?? {count: 0, ms: 0};
        ++entry.count;
        entry.ms += ms;
        this.times.set(what, entry);
    }

    reportTimes() {
        const file = process.env.KVCHECK_LLAMA_TIMES;
        if (!file) return;
        const {user, system} = process.cpuUsage();  // microseconds, the whole process
        this.times.set("cpu (user + system)", {count: 1, ms: (user + system) / 1000});
        fs.writeFileSync(file, JSON.stringify(Object.fromEntries(this.times), null, 1) + "\n");
    }

    // The GGUF of a folder's model.safetensors: the kept one, else converted.
    async gguf(folder) {
        const source = path.join(folder, "model.safetensors");
        const key = createHash("sha256").update(fs.readFileSync(source)).digest("hex");
        const kept = this.ggufs.get(key);
        if (kept != null) {
            this.ggufs.delete(key);  // most recently used last
            this.ggufs.set(key, kept);
            return kept;
        }
        const file = path.join(this.scratch, `model-${++this.converted}.gguf`);
        const began = performance.now();
        await this.exporter.convert(source, file);
        this.time("load: kvcheck-export", performance.now() - began);
        this.ggufs.set(key, file);
        for (const [old, oldFile] of this.ggufs) {
            if (this.ggufs.size <= kMaxGgufFiles) break;
            this.ggufs.delete(old);
            fs.rmSync(oldFile, {force: true});
        }
        return file;
    }

    // {model: LlamaModel, parked: []} of a folder's model.
    async load(folder) {
        const gguf = await this.gguf(folder);
        const llama = await this.llama;
        const began = performance.now();
        const small = fs.statSync(gguf).size <= kSmallModelBytes;
        const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0, ignoreMemorySafetyChecks: small});
        this.time("load: loadModel", performance.now() - began);
        return {model, parked: [], small};
    }

    // A context of `shape` for `loaded` with its spare sequence: a parked one
    // of that shape, else a new one from `create()`.
    async context(loaded, shape, create) {
        const key = JSON.stringify(shape);
        const at = loaded.parked.findIndex((parked) => parked.key === key);
        if (at >= 0) return loaded.parked.splice(at, 1)[0];
        const context = await create();
        return {key, long: shape.contextSize > kRoundedContextSize, context, spare: null};
    }

    // Keeps a reset context for the next create, or disposes it.
    async park(loaded, parked) {
        if (loaded.parked.length < (parked.long ? 1 : kMaxParkedPerModel)) loaded.parked.push(parked);
        else await parked.context.dispose();
    }

    async unload(loaded) {
        for (const parked of loaded.parked.splice(0)) await parked.context.dispose();
        await loaded.model.dispose();
    }
}
