// llama.cpp (node-llama-cpp's prebuilt CPU binary) served to kvcheck over the
// engine protocol, versions 1 and 2 (docs/ENGINE_PROTOCOL.md):
//
//   kvcheck campaign --backend exec:'node adapters/llama.cpp/engine.mjs'
//   kvcheck campaign --backend exec:'node adapters/llama.cpp/engine.mjs --kv f16 --flash-attn on'
//
// Options (part of the backend string, so a case file names the mode):
//   --kv f32|f16|bf16|q8_0|q4_0|q5_0|q5_1  K and V cache type (default f32);
//                          a quantized V (q8_0, q4_0, q5_0, q5_1) needs --flash-attn on
//   --kv-k TYPE, --kv-v TYPE  K's and V's cache type each (default: --kv's),
//                          llama.cpp's type_k and type_v
//   --flash-attn on|off    llama.cpp's flash attention (default off)
//   --export PATH          kvcheck-export binary (default: $KVCHECK_EXPORT, which
//                          kvcheck sets to the kvcheck-export beside itself)
//   --declare bitwise      measurement only: claim every invariance bitwise, so
//                          kvcheck's properties show which ones llama.cpp breaks
//   --arithmetic f32       measurement only: declare f32 arithmetic in any mode,
//                          so P1 measures a mode against the f32 bound
//   --raw-k                measurement only: cache snapshots return K as llama.cpp
//                          stores it (adjacent-pair RoPE layout; q8_0 at head_dim
//                          a multiple of 64: Hadamard-rotated), not un-permuted
//                          or rotated back, so P6 shows that both matter
//   --state-as-saved       measurement only: snapshot llama.cpp's saved sequence
//                          state without first applying pending stream copies
//                          (shows docs/findings/llama_cpp_state_after_fork_stale.md)
//   --erase-shift on|off   declare erase and shift (default on); off leaves them
//                          out of the traits, e.g. for a q8_0 campaign on the
//                          other properties (a q8_0 K shift crashes llama.cpp at
//                          head sizes not a multiple of 64, and at every size
//                          with the rotation off, --attn-rot's default:
//                          docs/findings/llama_cpp_quantized_k_shift_crash.md)
//   --save-restore on|off  declare save and restore (default off): save writes
//                          the sequence's state as a user does (saveStateToFile,
//                          no decode first), restore loads it into the same
//                          sequence (loadStateFromFile); docs/LLAMA_CPP.md,
//                          "Save and restore"
//   --attn-rot on|off      llama.cpp's Hadamard rotation of a quantized K/V at
//                          head sizes a multiple of 64 (attn_rot_k / attn_rot_v;
//                          default off: the adapter sets LLAMA_ATTN_ROT_DISABLE=1
//                          in its own environment, so quantized modes draw heads
//                          of 64 and 128 under the derived bounds, which do not
//                          model the rotation; on sets it to 0, llama.cpp's
//                          default, and those heads stay outside the limits).
//                          docs/LLAMA_CPP.md, "The Hadamard rotation"
//   --gpt2                 also accept the gpt2 family (its GELU runs through an
//                          f16 table: docs/LLAMA_CPP.md; off by default)
//
// Mapping (docs/LLAMA_CPP.md, "The adapter"):
//   load     the folder's model.safetensors -> GGUF by `kvcheck-export --from`
//            (one GGUF writer, model/gguf.cpp), loaded with gpuLayers 0
//   create   one LlamaContext: `max_rows` context sequences of max(capacity,
//            max_pos) + 1 cells each (node-llama-cpp keeps one cell free) and a
//            spare one (Engine.applyPendingUpdates), one thread, context shift
//            refused (never an erase); the adapter keeps each sequence's cells
//            (positions, slot order) and refuses past `capacity` cells or
//            `max_pos` positions itself
//   start    context.getSequence(); finish: sequence.dispose() (llama.cpp
//            removes the sequence's cells); reset: every sequence disposed
//   step     each entry's controlledEvaluate issued before any is awaited, so
//            node-llama-cpp's batch dispatcher decodes them in one llama_decode
//   fork     a new context sequence copies the parent's cells (llama_memory_seq_cp,
//            the whole range: node-llama-cpp's private
//            sequence._copyStateFromOtherSequence, 3.22.1), then loses those of
//            the parent's slots n.. (llama_memory_seq_rm)
//   truncate llama_memory_seq_rm of the positions of the last n cells
//   erase    llama_memory_seq_rm(seq, p0, p1): the gap stays
//   shift    llama_memory_seq_add(seq, p0, p1, delta): llama.cpp re-rotates K
//            at the next decode. erase, shift, truncate and the fork's removal
//            call the private addon (context._ctx) and rebuild node-llama-cpp's
//            private position bookkeeping (syncBookkeeping): the next token goes
//            at the largest held position + 1
//   cache    sequence.saveStateToFile (llama_state_seq_save_file) into the scratch
//            folder, parsed by state_file.mjs: K/V widened to f32, K rows of
//            the llama family un-permuted to kvcheck's rotate-half layout, in
//            the adapter's slot order with each cell's position; a q8_0
//            K/V that llama.cpp stored Hadamard-rotated (head_dim a multiple
//            of 64) rotated back (state_file.mjs, cacheRotations)
//   save     sequence.saveStateToFile (llama_state_seq_save_file) into the
//            scratch folder, as a user calls it: no decode first, so a pending
//            copy or shift is not applied (docs/findings/
//            llama_cpp_state_after_fork_stale.md); the adapter keeps the file
//            and the cells
//   restore  sequence.loadStateFromFile (llama_state_seq_load_file into the
//            same sequence: llama.cpp clears its cells first); the adapter's
//            cells and node-llama-cpp's bookkeeping return to the saved ones
// Refusals (capacity, rows, unknown sequence, bad batch, bad token) are
// checked before llama.cpp sees the step, so a refused step changes nothing.
// Exit codes: 0 on end of input or "bye", 2 bad options.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {parseArgs} from "node:util";

import {getLlama, LlamaLogLevel} from "node-llama-cpp";

import {checkStepEntries, EngineError, findExport, Ids, serve} from "../node-protocol/protocol.mjs";

import {contextShape, ModelStore} from "./model_store.mjs";
import {cacheRotations, kQuantized, parseSequenceState, snapshotLayer} from "./state_file.mjs";
import {traitsFor} from "./traits.mjs";

const kKvTypes = {f32: "F32", f16: "F16", bf16: "BF16", q8_0: "Q8_0", q4_0: "Q4_0", q5_0: "Q5_0",
                  q5_1: "Q5_1"};

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
                "kv-k": {type: "string"},
                "kv-v": {type: "string"},
                "flash-attn": {type: "string", default: "off"},
                "export": {type: "string"},
                "gpt2": {type: "boolean", default: false},
                "erase-shift": {type: "string", default: "on"},
                "save-restore": {type: "string", default: "off"},
                "attn-rot": {type: "string", default: "off"},
                "declare": {type: "string", default: "measured"},
                "arithmetic": {type: "string", default: "measured"},
                "raw-k": {type: "boolean", default: false},
                "state-as-saved": {type: "boolean", default: false}
            }
        }));
    } catch (error) {
        usage(error.message);
    }
    const names = Object.keys(kKvTypes).join(", ");
    for (const option of ["kv", "kv-k", "kv-v"]) {
        if (values[option] != null && kKvTypes[values[option]] == null)
            usage(`--${option}: expected one of ${names}, got "${values[option]}"`);
    }
    const kvK = values["kv-k"] ?? values.kv, kvV = values["kv-v"] ?? values.kv;
    const flash = values["flash-attn"];
    if (flash !== "on" && flash !== "off") usage(`--flash-attn: expected on or off, got "${flash}"`);
    // llama.cpp refuses a quantized V cache without flash attention.
    if (kQuantized.has(kvV) && flash !== "on")
        usage(`V cache type ${kvV} needs --flash-attn on (llama.cpp refuses a quantized V cache without it)`);
    const eraseShift = values["erase-shift"];
    if (eraseShift !== "on" && eraseShift !== "off") usage(`--erase-shift: expected on or off, got "${eraseShift}"`);
    const saveRestore = values["save-restore"];
    if (saveRestore !== "on" && saveRestore !== "off") usage(`--save-restore: expected on or off, got "${saveRestore}"`);
    const attnRot = values["attn-rot"];
    if (attnRot !== "on" && attnRot !== "off") usage(`--attn-rot: expected on or off, got "${attnRot}"`);
    if (values.declare !== "measured" && values.declare !== "bitwise")
        usage(`--declare: expected measured or bitwise, got "${values.declare}"`);
    if (values.arithmetic !== "measured" && values.arithmetic !== "f32")
        usage(`--arithmetic: expected measured or f32, got "${values.arithmetic}"`);
    return {kvK, kvV, flashAttention: flash === "on", exportPath: values.export, gpt2: values.gpt2,
            declare: values.declare, arithmetic: values.arithmetic, rawK: values["raw-k"],
            stateAsSaved: values["state-as-saved"], eraseShift: eraseShift === "on",
            saveRestore: saveRestore === "on", attnRot: attnRot === "on"};
}

// kvcheck-export: --export, else $KVCHECK_EXPORT (node-protocol's findExport).
function exporter(given) {
    const {file, problem} = findExport(given);
    if (problem) usage(problem);
    return file;
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

// ---- engines ---------------------------------------------------------------

function refuseContextShift() {
    throw new Error("context shift is disabled: the sequence outgrew its capacity");
}

// node-llama-cpp 3.22.1 positions a sequence's next chunk at its private
// `_nextTokenIndex` (LlamaContextSequence._decodeTokens hands it to the batch
// as the first token's position and checks it against the context size) and
// keeps the private `_contextTokens`, one token per index, which it appends to
// and which `_copyStateFromOtherSequence` copies (the fork's token count). Its
// own bookkeeping assumes cell i holds position i. After the adapter moved or
// removed cells itself (erase, shift, truncate, fork), both are rebuilt from
// the adapter's cell list: the next position is the largest held + 1
// (llama.cpp requires exactly seq_pos_max + 1, llama-batch.cpp), index p
// holds the token at position p, a gap holds token 0 (never read: the adapter
// uses no token predictor, checkpoints or prefix matching).
function syncBookkeeping(sequence, cells) {
    if (sequence._loadedTokenPredictions?.length !== 0)
        throw new Error("node-llama-cpp holds token predictions (not 3.22.1, or a token predictor?)");
    const next = nextPosition(cells);
    const tokens = new Array(next).fill(0);
    for (const cell of cells) tokens[cell.pos] = cell.token;
    sequence._contextTokens = tokens;
    sequence._nextTokenIndex = next;
}

// The next fed token's position: the largest held + 1, 0 when none is held.
function nextPosition(cells) {
    return cells.reduce((next, cell) => Math.max(next, cell.pos + 1), 0);
}

// The position ranges [p0, p1) that cover exactly the given positions.
function positionRuns(positions) {
    const sorted = [...positions].sort((a, b) => a - b);
    const runs = [];
    for (const p of sorted) {
        const last = runs[runs.length - 1];
        if (last != null && last[1] === p) last[1] = p + 1;
        else runs.push([p, p + 1]);
    }
    return runs;
}

// A snapshot in position order (snapshotLayer) rearranged into the
// sequence's slot order, with each slot's position: after a shift the slots
// need not hold ascending positions (docs/OPERATIONS.md, "Erase and shift").
// llama.cpp must hold exactly the positions the adapter's cells hold.
function inSlotOrder(byPosition, cells, width) {
    const row = new Map((byPosition.positions ?? []).map((pos, i) => [pos, i]));
    const k = new Float32Array(cells.length * width), v = new Float32Array(cells.length * width);  // [n][KVH][D]
    cells.forEach((cell, slot) => {
        const i = row.get(cell.pos);
        if (i === undefined)
            throw new Error(`cache: llama.cpp holds positions ${(byPosition.positions ?? []).join(",")}, the adapter's cells ${cells.map((c) => c.pos).join(",")}`);
        k.set(byPosition.k.subarray(i * width, (i + 1) * width), slot * width);
        v.set(byPosition.v.subarray(i * width, (i + 1) * width), slot * width);
    });
    return {length: cells.length, k, v, positions: cells.map((cell) => cell.pos)};
}

class Engine {
    // parked: {key, context, spare} from ModelStore.context (spare null: a new context).
    constructor(parked, model, capacity, maxRows, {kvK, kvV, rawK, stateAsSaved}) {
        const {context} = parked;
        this.parked = parked;
        this.context = context;      // LlamaContext: contextShape's sequences of max(capacity, max_pos) + 1 cells
        this.model = model;          // {model, vocab, shape, maxPos}
        this.types = {k: kvK, v: kvV};  // "f32" | "f16" | "bf16" | "q8_0" | "q4_0": K's, V's ggml type
        this.rawK = rawK;            // --raw-k (measurement only): K as llama.cpp stores it
        this.stateAsSaved = stateAsSaved;  // --state-as-saved: no update before a snapshot
        // One cell, for applyPendingUpdates; created first, so a new and a
        // parked context number the sequences alike.
        this.reused = parked.spare != null;  // a parked context (diagnosis: trace)
        this.spare = parked.spare ?? context.getSequence({contextShift: {strategy: refuseContextShift}});
        this.parked.spare = this.spare;
        this.broken = false;         // a call failed inside llama.cpp or node-llama-cpp: never parked
        this.snapshots = new Map();  // protocol id -> {generation, parsed state file}
        this.sinceDecode = false;    // a call since the last decode (llama.cpp updates may be pending)
        this.capacity = capacity;    // cells per sequence
        this.maxRows = maxRows;
        this.sequences = new Map();  // protocol id -> LlamaContextSequence
        // protocol id -> [{pos, token}]: the sequence's cells in slot order
        // (the order they were fed), as docs/OPERATIONS.md defines them. It is
        // what llama.cpp holds for the sequence (every call that changes the
        // cells goes through this adapter), so refusals are decided here,
        // before llama.cpp sees anything.
        this.cells = new Map();
        this.saved = new Map();  // protocol id -> {file, cells}: its last save
    }

    // The addon object (node-llama-cpp's private `context._ctx`, 3.22.1):
    // removeTokenCellsFromSequence(seq, p0, p1) is llama_memory_seq_rm and
    // shiftSequenceTokenCells(seq, p0, p1, delta) is llama_memory_seq_add
    // (llama/addon/AddonContext.cpp). The public eraseContextTokenRanges
    // always shifts what follows a removed range and re-evaluates when the
    // range starts at the smallest held position, so it can express neither a
    // gap nor a lone shift (docs/LLAMA_CPP.md, "Erase and shift").
    native() {
        const native = this.context._ctx;
        if (typeof native?.removeTokenCellsFromSequence !== "function" ||
            typeof native?.shiftSequenceTokenCells !== "function")
            throw new EngineError("unsupported", "node-llama-cpp has no _ctx.removeTokenCellsFromSequence / shiftSequenceTokenCells (not 3.22.1?)");
        return native;
    }

    start(newId) {
        if (this.sequences.size >= this.maxRows)
            throw new EngineError("rows", `all ${this.maxRows} rows are taken`);
        const sequence = this.context.getSequence({contextShift: {strategy: refuseContextShift}});
        const id = newId();
        this.sequences.set(id, sequence);
        this.cells.set(id, []);
        return id;
    }

    sequence(id) {
        const sequence = this.sequences.get(id);
        if (sequence == null) throw new EngineError("unknown_sequence", `no live sequence ${id}`);
        return sequence;
    }

    length(id) {
        this.sequence(id);
        return this.cells.get(id).length;
    }

    // Every refusal before llama.cpp sees anything, so a refused step changes nothing.
    validate(entries) {
        checkStepEntries(entries, (id) => this.sequence(id), this.model.vocab);
        for (const entry of entries) {
            const cells = this.cells.get(entry.sequence);
            if (cells.length + entry.tokens.length > this.capacity)
                throw new EngineError("capacity", `sequence ${entry.sequence} has ${cells.length} of ${this.capacity} cells, the step adds ${entry.tokens.length}`);
            // After an erase the cells no longer bound the positions.
            const next = nextPosition(cells);
            if (next + entry.tokens.length > this.model.maxPos)
                throw new EngineError("capacity", `sequence ${entry.sequence}: ${entry.tokens.length} tokens at position ${next} pass max_pos ${this.model.maxPos}`);
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
        for (const entry of entries) {
            const cells = this.cells.get(entry.sequence);
            const first = nextPosition(cells);
            entry.tokens.forEach((token, i) => cells.push({pos: first + i, token}));
            const sequence = this.sequence(entry.sequence);
            if (sequence.nextTokenIndex !== nextPosition(cells))
                throw new Error(`sequence ${entry.sequence}: node-llama-cpp is at position ${sequence.nextTokenIndex}, the adapter at ${nextPosition(cells)}`);
        }
        return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
    }

    // Removes the given cells of a sequence from llama.cpp (llama_memory_seq_rm
    // of the runs of their positions) and from the adapter's list.
    removeCells(id, doomed) {
        if (doomed.length === 0) return;
        const sequence = this.sequence(id);
        const native = this.native();
        for (const [p0, p1] of positionRuns(doomed.map((cell) => cell.pos))) {
            if (!native.removeTokenCellsFromSequence(sequence._sequenceId, p0, p1))
                throw new Error(`llama_memory_seq_rm(${sequence._sequenceId}, ${p0}, ${p1}) failed`);
        }
        const gone = new Set(doomed);
        this.cells.set(id, this.cells.get(id).filter((cell) => !gone.has(cell)));
        syncBookkeeping(sequence, this.cells.get(id));
    }

    // A fresh context sequence holding the parent's first n cells (slot order)
    // with their positions: llama.cpp copies every cell of the parent into it
    // (llama_memory_seq_cp; node-llama-cpp runs one KV stream per sequence, so
    // the stream's K/V are copied at the next update), then the adapter
    // removes the child's cells of the parent's slots n.. (llama_memory_seq_rm).
    // node-llama-cpp 3.22.1 copies in its private _copyStateFromOtherSequence,
    // which also copies the token list; asked for every token, it erases none.
    async fork(parentId, n, newId) {
        const parent = this.sequence(parentId);
        const parentCells = this.cells.get(parentId);
        const length = parentCells.length;
        if (!Number.isInteger(n) || n < 0 || n > length)
            throw new EngineError("bad_batch", `fork of ${n} tokens from sequence ${parentId} of ${length}`);
        if (this.sequences.size >= this.maxRows)
            throw new EngineError("rows", `all ${this.maxRows} rows are taken`);
        if (typeof parent._copyStateFromOtherSequence !== "function")
            throw new EngineError("unsupported", "fork: node-llama-cpp has no sequence._copyStateFromOtherSequence (not 3.22.1?)");
        const child = this.context.getSequence({contextShift: {strategy: refuseContextShift}});
        const id = newId();
        // A fork of 0 tokens holds nothing: a fresh sequence is exactly that.
        // (node-llama-cpp's copy reports failure for a parent with no tokens,
        // docs/LLAMA_CPP.md "Fork and truncate".)
        if (n === 0) {
            this.sequences.set(id, child);
            this.cells.set(id, []);
            return id;
        }
        const all = parent.nextTokenIndex;
        const copied = await child._copyStateFromOtherSequence(parent, all);
        if (!copied || child.nextTokenIndex !== all) {
            const held = child.nextTokenIndex;
            await child.dispose();
            throw new Error(`fork: node-llama-cpp's copy left ${held} positions where ${all} were asked (copy ${copied ? "succeeded" : "failed"})`);
        }
        this.sequences.set(id, child);
        this.cells.set(id, parentCells.map((cell) => ({...cell})));
        this.removeCells(id, this.cells.get(id).slice(n));
        syncBookkeeping(child, this.cells.get(id));
        return id;
    }

    // Forgets the last n cells in slot order (llama_memory_seq_rm of their
    // positions); the next position is then the largest remaining + 1.
    truncate(id, n) {
        this.sequence(id);
        const cells = this.cells.get(id);
        if (!Number.isInteger(n) || n < 0 || n > cells.length)
            throw new EngineError("bad_batch", `truncate of ${n} tokens from sequence ${id} of ${cells.length}`);
        this.removeCells(id, cells.slice(cells.length - n));
    }

    // Removes the cells holding positions [p0, p1), leaving the gap
    // (llama_memory_seq_rm(seq, p0, p1)). A range that holds no cell changes nothing.
    erase(id, p0, p1) {
        this.sequence(id);
        if (!Number.isInteger(p0) || !Number.isInteger(p1) || p0 < 0 || p1 < p0)
            throw new EngineError("bad_batch", `erase: sequence ${id}: range [${p0}, ${p1}) needs 0 <= p0 <= p1`);
        this.removeCells(id, this.cells.get(id).filter((cell) => cell.pos >= p0 && cell.pos < p1));
    }

    // Adds delta to the positions of the cells holding [p0, p1)
    // (llama_memory_seq_add(seq, p0, p1, delta); llama.cpp re-rotates their
    // K by delta at the next llama_decode, V untouched). Refused, changing
    // nothing, when a moved position leaves [0, max_pos) (llama.cpp would
    // silently drop a cell moved below 0) or two cells would hold one position.
    shift(id, p0, p1, delta) {
        const sequence = this.sequence(id);
        if (!Number.isInteger(p0) || !Number.isInteger(p1) || !Number.isInteger(delta) || p0 < 0 || p1 < p0)
            throw new EngineError("bad_batch", `shift: sequence ${id}: range [${p0}, ${p1}) needs 0 <= p0 <= p1`);
        const cells = this.cells.get(id);
        const inRange = (cell) => cell.pos >= p0 && cell.pos < p1;
        const moved = cells.map((cell) => inRange(cell) ? cell.pos + delta : cell.pos);
        cells.forEach((cell, i) => {
            if (inRange(cell) && (moved[i] < 0 || moved[i] >= this.model.maxPos))
                throw new EngineError("bad_batch", `shift: sequence ${id}: position ${cell.pos} + delta ${delta} leaves [0, max_pos ${this.model.maxPos})`);
        });
        if (new Set(moved).size !== moved.length)
            throw new EngineError("bad_batch", `shift: sequence ${id}: shifting [${p0}, ${p1}) by ${delta} makes two cells hold one position`);
        if (delta === 0 || !cells.some(inRange)) return;
        this.native().shiftSequenceTokenCells(sequence._sequenceId, p0, p1, delta);
        cells.forEach((cell, i) => (cell.pos = moved[i]));
        syncBookkeeping(sequence, cells);
    }

    // Sequence state (docs/LLAMA_CPP.md, "Save and restore"): one file per
    // sequence, replaced by its next save.
    async save(id, scratch) {
        const sequence = this.sequence(id);
        const file = path.join(scratch, `saved-${sequence._sequenceId}-${id}.bin`);
        await sequence.saveStateToFile(file);
        this.saved.set(id, {file, cells: this.cells.get(id).map((cell) => ({...cell}))});
    }

    async restore(id) {
        const sequence = this.sequence(id);
        const saved = this.saved.get(id);
        if (saved == null) throw new EngineError("bad_batch", `restore: sequence ${id} was never saved`);
        await sequence.loadStateFromFile(saved.file, {acceptRisk: true});
        this.cells.set(id, saved.cells.map((cell) => ({...cell})));
        syncBookkeeping(sequence, this.cells.get(id));
    }

    forget(id) {
        const saved = this.saved.get(id);
        this.saved.delete(id);
        if (saved) fs.rmSync(saved.file, {force: true});
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
                                                     kType: this.types.k, vType: this.types.v,
                                                     seqId: sequence._sequenceId});
            const cells = this.cells.get(id);
            if (state.positions.length !== cells.length)
                throw new Error(`cache: llama.cpp's state holds ${state.positions.length} cells, the adapter ${cells.length}`);
            memo = {generation, state};
            this.snapshots.set(id, memo);
        }
        // llama.cpp reads LLAMA_ATTN_ROT_DISABLE from this process's
        // environment when it creates the cache, as cacheRotations does here.
        const rotations = cacheRotations(this.types, shape.headDim, process.env.LLAMA_ATTN_ROT_DISABLE);
        if (this.rawK) rotations.k = 0;
        const byPosition = snapshotLayer(memo.state, layer, {kvHeads: shape.kvHeads, headDim: shape.headDim,
                                                            permuted: shape.permutedK && !this.rawK, rotations});
        return inSlotOrder(byPosition, this.cells.get(id), shape.kvHeads * shape.headDim);
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
        this.cells.delete(id);
        this.forget(id);
        await sequence.dispose();
    }

    async reset() {
        const all = [...this.sequences.values()];
        for (const id of [...this.saved.keys()]) this.forget(id);
        this.sequences.clear();
        this.cells.clear();
        for (const sequence of all) await sequence.dispose();
    }

    // Every sequence removed and llama.cpp's queued updates applied: the
    // context as a new one, for ModelStore.park. Null when it cannot be.
    //
    // node-llama-cpp 3.22.1 hands out sequence ids from its private
    // `_unusedSequenceIds` (first freed, first reused) before new ones
    // (`_nextGeneratedSequenceId`), and which ids share a step changes the
    // batch's layout, so the logits' last bits (P8 failed on a parked context
    // after `finish s1` freed id 2 before the reset freed id 1). So the ids
    // are put back as a new context has them: the spare's 0 taken, the next 1.
    async resetForReuse() {
        if (this.broken) return null;
        await this.reset();
        if (this.sinceDecode) await this.applyPendingUpdates();
        const context = this.context;
        const spareId = this.spare._sequenceId;
        const free = [...(context._unusedSequenceIds ?? [])].sort((a, b) => a - b);
        const issued = context._nextGeneratedSequenceId;
        if (spareId !== 0 || !Number.isInteger(issued) || free.length !== issued - 1 || free.some((id, i) => id !== i + 1))
            return null;  // not node-llama-cpp 3.22.1's bookkeeping, or a sequence still held
        context._unusedSequenceIds = [];
        context._nextGeneratedSequenceId = 1;
        return this.parked;
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

// Diagnosis only: with KVCHECK_LLAMA_TRACE=FILE, every erase, shift, truncate,
// fork, save, restore and create request is appended to FILE as one JSON line with the
// reply's error kind ("ok" if none; a create: "new" or "parked", whether its
// context was made or reused), so that a campaign's use of them can be
// counted (kvcheck's coverage line does not list them).
const kTraced = new Set(["erase", "shift", "truncate", "fork", "create", "save", "restore"]);
function trace(request, reply, server) {
    const file = process.env.KVCHECK_LLAMA_TRACE;
    if (!file || !kTraced.has(request?.op)) return;
    let result = reply.error?.kind ?? "ok";
    if (request.op === "create" && result === "ok") result = server.engines.get(reply.engine).reused ? "parked" : "new";
    fs.appendFileSync(file, JSON.stringify({...request, result}) + "\n");
}

class Server {
    constructor(options, llama, exporter) {
        this.options = options;
        this.scratch = fs.mkdtempSync(path.join(os.tmpdir(), "kvcheck-llama-"));
        this.store = new ModelStore(this.scratch, exporter, llama);
        this.models = new Map();   // id -> {model, vocab, shape, maxPos, loaded (ModelStore.load)}
        this.engines = new Map();  // id -> Engine
        this.ids = new Ids();      // model, engine and sequence ids (kvcheck's in version 2)
        this.generation = 0;       // counts calls that may change a cache (cache snapshots' memo)
    }

    engine(request) {
        const engine = this.engines.get(request.engine);
        if (engine == null) throw new EngineError("input", `unknown engine ${request.engine}`);
        return engine;
    }

    async load(request) {
        const folder = request.path;
        if (typeof folder !== "string") throw new EngineError("input", "load: path is not a string");
        const id = this.ids.of(request, "model");
        const loaded = await this.store.load(folder);
        const {model} = loaded;
        const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
        // max_pos bounds the positions a shift may reach and the next fed
        // position (docs/OPERATIONS.md, "Erase and shift"); the GGUF's
        // context_length is not read back, the folder's config is the source.
        const maxPos = JSON.parse(fs.readFileSync(path.join(folder, "config.json"), "utf8")).max_pos;
        if (!Number.isInteger(maxPos) || maxPos < 1) throw new EngineError("input", `load: ${folder}/config.json: max_pos ${maxPos}`);
        this.models.set(id, {model, vocab, shape: kvShape(model.fileInfo.metadata), maxPos, loaded});
        return id;
    }

    async create(request) {
        const model = this.models.get(request.model);
        if (model == null) throw new EngineError("input", `unknown model ${request.model}`);
        const {capacity, max_rows: maxRows} = request;
        if (!Number.isInteger(capacity) || capacity < 1) throw new EngineError("input", `capacity ${capacity}`);
        if (!Number.isInteger(maxRows) || maxRows < 1) throw new EngineError("input", `max_rows ${maxRows}`);
        // kv_dtype is K's type (V's is the traits' arithmetic.v_dtype).
        if (request.kv_dtype !== this.options.kvK)
            throw new EngineError("input", `kv_dtype ${request.kv_dtype}: this adapter runs K in ${this.options.kvK}`);
        // node-llama-cpp keeps one cell free and refuses a position past
        // contextSize - 1; after an erase, positions run ahead of the cells
        // (up to max_pos), so the context covers both. The adapter refuses a
        // step past `capacity` cells itself (validate). At least maxRows
        // sequences and the spare (Engine.applyPendingUpdates), and a batch
        // that holds any step (capacity tokens per sequence), rounded up
        // (contextShape) so that one model's engines share parked contexts.
        const shape = contextShape(capacity, maxRows, model.maxPos);
        const parked = await this.store.context(model.loaded, shape, async () => {
            const context = await model.model.createContext({
                ...shape, threads: 1, flashAttention: this.options.flashAttention,
                ignoreMemorySafetyChecks: model.loaded.small,
                experimentalKvCacheKeyType: kKvTypes[this.options.kvK],
                experimentalKvCacheValueType: kKvTypes[this.options.kvV]
            });
            if (process.env.KVCHECK_LLAMA_COUNT_DECODES) countDecodes(context);
            return context;
        });
        const id = this.ids.of(request, "engine");
        this.engines.set(id, new Engine(parked, model, capacity, maxRows, this.options));
        return id;
    }

    // One request -> [reply, payloads].
    async handle(r) {
        if (r.op !== "cache" && r.op !== "length") ++this.generation;  // a call that may change a cache
        const target = this.engines.get(r.engine);
        if (target && r.op !== "cache" && r.op !== "length") target.sinceDecode = true;  // until a decode
        switch (r.op) {
            case "hello":
                return [{protocol: this.ids.agree(r), traits: traitsFor(this.options)}, []];
            case "load":
                return [{model: await this.load(r)}, []];
            case "unload": {
                const model = this.models.get(r.model);
                this.models.delete(r.model);
                if (model) await this.store.unload(model.loaded);
                return [{}, []];
            }
            case "create":
                return [{engine: await this.create(r)}, []];
            case "destroy": {
                const engine = this.engines.get(r.engine);
                this.engines.delete(r.engine);
                if (engine == null) return [{}, []];
                const parked = await engine.resetForReuse();
                if (parked) await this.store.park(engine.model.loaded, parked);
                else await engine.context.dispose();
                return [{}, []];
            }
            case "start":
                return [{sequence: this.engine(r).start(() => this.ids.of(r, "sequence"))}, []];
            case "step": {
                const logits = await this.engine(r).step(r.entries);
                return [{payloads: [logits.length]}, [logits]];
            }
            case "fork":
                return [{sequence: await this.engine(r).fork(r.parent, r.n, () => this.ids.of(r, "sequence"))}, []];
            case "truncate":
                this.engine(r).truncate(r.sequence, r.n);
                return [{}, []];
            case "erase":
                this.engine(r).erase(r.sequence, r.p0, r.p1);
                return [{}, []];
            case "shift":
                this.engine(r).shift(r.sequence, r.p0, r.p1, r.delta);
                return [{}, []];
            case "save":
                await this.engine(r).save(r.sequence, this.scratch);
                return [{}, []];
            case "restore":
                await this.engine(r).restore(r.sequence);
                return [{}, []];
            case "finish":
                await this.engine(r).finish(r.sequence);
                return [{}, []];
            case "reset":
                await this.engine(r).reset();
                return [{}, []];
            case "length":
                return [{length: this.engine(r).length(r.sequence)}, []];
            case "cache": {
                const {length, k, v, positions} = await this.engine(r).cache(r.sequence, r.layer, this.generation, this.scratch);
                return [{length, positions, payloads: [k.byteLength, v.byteLength]},
                        [Buffer.from(k.buffer, k.byteOffset, k.byteLength), Buffer.from(v.buffer, v.byteOffset, v.byteLength)]];
            }
            default:
                throw new EngineError("input", `unknown op ${JSON.stringify(r.op)}`);
        }
    }
}

// Server.handle, timed per request kind (ModelStore.time; a create on a
// parked context apart). An error inside llama.cpp or node-llama-cpp may
// leave the context in any state: its engine is marked broken, so that
// destroy does not park it for reuse; serve answers the error.
async function handleTimed(server, request) {
    const began = performance.now();
    try {
        const [reply, payloads] = await server.handle(request);
        server.store.time(request.op === "create" && server.engines.get(reply.engine)?.reused
            ? "create (parked)" : request.op, performance.now() - began);
        return [reply, payloads];
    } catch (error) {
        const engine = server.engines.get(request?.engine);
        if (engine && !(error instanceof EngineError)) engine.broken = true;
        throw error;
    }
}

async function main() {
    const options = parseOptions();
    // llama.cpp reads LLAMA_ATTN_ROT_DISABLE (atoi) from this process's
    // environment when it creates a cache, and so do the traits and the
    // snapshot (cacheRotations): the adapter owns it, whatever was inherited.
    process.env.LLAMA_ATTN_ROT_DISABLE = options.attnRot ? "0" : "1";
    const exportPath = exporter(options.exportPath);
    // Nothing compiled or downloaded at run time; CPU only. Started here and
    // awaited at the first load, so that hello is answered at once (on a busy
    // machine node-llama-cpp's start took more than kvcheck's 30 s per call).
    const llama = getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.error});
    llama.catch(() => {});  // reported by the load that awaits it
    const server = new Server(options, llama, exportPath);
    try {
        await serve(process.stdin, process.stdout, (request) => handleTimed(server, request),
                    (request, reply) => trace(request, reply, server));
    } finally {
        fs.rmSync(server.scratch, {recursive: true, force: true});
        server.store.reportTimes();
    }
    process.exit(0);
}

main().catch((error) => {
    process.stderr.write(`engine.mjs: ${error?.stack ?? error}\n`);
    process.exit(1);
});
