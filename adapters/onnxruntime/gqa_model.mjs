// One kvcheck model in ONNX Runtime: the graph kvcheck-export writes
// (model/onnx_model.h, attention through com.microsoft GroupQueryAttention)
// in one InferenceSession, and the call that runs a group of sequences
// through it with their past K/V. The operator decides from its inputs alone
// whether a call is a first prompt, so which sequences may share a call is
// decided here (planCalls), from the rules of its CPU kernel
// (group_query_attention_helper.h, docs/ONNXRUNTIME.md "One step, several calls"):
//   - first prompts (no past): any chunk lengths, right-padded to the longest;
//   - decodes (one token, with or without past): any past lengths;
//   - a chunk of several tokens after a past: alone (batch 1).
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import path from "node:path";

import ort from "onnxruntime-node";

// The graph's fixed shapes, from the folder's config.json.
export function readConfig(folder) {
    const config = JSON.parse(fs.readFileSync(path.join(folder, "config.json"), "utf8"));
    for (const key of ["n_layers", "n_kv_heads", "head_dim", "vocab", "max_pos"]) {
        if (!Number.isInteger(config[key]) || config[key] < 1)
            throw new Error(`${folder}/config.json: ${key} ${config[key]}`);
    }
    return config;
}

// `kvcheck-export --from DIR/model.safetensors --out FILE.onnx` (one ONNX
// writer); `packed`: --packed-qkv, Q|K|V in one input of the operator.
export function exportOnnx(exporter, folder, file, packed = false) {
    try {
        execFileSync(exporter, ["--from", path.join(folder, "model.safetensors"), "--out", file, ...(packed ? ["--packed-qkv"] : [])],
            {stdio: ["ignore", "ignore", "pipe"]});
    } catch (error) {
        throw new Error(`kvcheck-export --from ${folder}/model.safetensors --out ${file} failed: ${error.stderr ?? error.message}`);
    }
}

// Groups of row indices that one GroupQueryAttention call may hold; `rows`
// are {past, n}. mode "grouped" (default), "separate" (every row alone) or
// "one" (measurement only: every row in one call, as a caller who trusts the
// operator's input check would batch; Engine.step falls back to "grouped"
// where the operator refuses it).
export function planCalls(rows, mode = "grouped") {
    if (mode === "separate") return rows.map((_, i) => [i]);
    if (mode === "one") return [rows.map((_, i) => i)];
    const prompts = [], decodes = [], alone = [];
    rows.forEach((row, i) => {
        if (row.past === 0) prompts.push(i);
        else if (row.n === 1) decodes.push(i);
        else alone.push([i]);
    });
    return [prompts, decodes, ...alone].filter((group) => group.length > 0);
}

export class GqaModel {
    constructor(session, config) {
        this.session = session;  // ort.InferenceSession
        this.config = config;    // kvcheck config (config.json)
    }

    static async open(file, config, {threads, optimization}) {
        const session = await ort.InferenceSession.create(file, {
            intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: "sequential",
            graphOptimizationLevel: optimization, logSeverityLevel: 3
        });
        return new GqaModel(session, config);
    }

    // Runs rows [{tokens, past, k: [L] Float32Array [KVH][cap][D], v: likewise}]
    // in one call; their positions past..past+n-1 get K/V written back in place
    // (cap >= past + n). Returns each row's logits, Float32Array [n][V].
    // buffer "separate": past tensors of the group's longest past, present
    // allocated by ONNX Runtime; "shared": one [B][KVH][cap][D] tensor per
    // layer and K/V bound as both past and present (the operator's
    // past_present_share_buffer mode, which onnxruntime-genai uses).
    async run(rows, cap, buffer = "separate") {
        const {n_layers: layers, vocab} = this.config;
        const width = Math.max(...rows.map((row) => row.tokens.length));
        const length = buffer === "shared" ? cap : Math.max(...rows.map((row) => row.past));
        const feeds = this.tokenFeeds(rows, width);
        const fetches = {logits: null};
        for (let l = 0; l < layers; ++l) {
            for (const which of ["key", "value"]) {
                const tensor = this.pastTensor(rows, cap, length, which === "key" ? "k" : "v", l);
                feeds[`past_key_values.${l}.${which}`] = tensor;
                fetches[`present.${l}.${which}`] = buffer === "shared" ? tensor : null;
            }
        }
        const out = await this.session.run(feeds, fetches);
        for (let l = 0; l < layers; ++l) {
            for (const which of ["key", "value"])
                this.keepPresent(rows, cap, out[`present.${l}.${which}`], which === "key" ? "k" : "v", l);
        }
        const logits = out.logits.data;  // [B][S][V]
        return rows.map((row, b) => logits.slice(b * width * vocab, (b * width + row.tokens.length) * vocab));
    }

    // Layer l's K or V of the rows as one past tensor [B][KVH][length][D],
    // each row's first `past` positions filled, the rest zero.
    pastTensor(rows, cap, length, which, l) {
        const {n_kv_heads: kvh, head_dim: d} = this.config;
        const past = new Float32Array(rows.length * kvh * length * d);  // [B][KVH][length][D]
        rows.forEach((row, b) => {
            for (let h = 0; h < kvh; ++h)
                past.set(row[which][l].subarray(h * cap * d, (h * cap + row.past) * d), (b * kvh + h) * length * d);
        });
        return new ort.Tensor("float32", past, [rows.length, kvh, length, this.config.head_dim]);
    }

    // Copies each row's positions 0..past+n-1 of a present tensor [B][KVH][T][D] back.
    keepPresent(rows, cap, present, which, l) {
        const {n_kv_heads: kvh, head_dim: d} = this.config;
        const total = present.dims[2];
        rows.forEach((row, b) => {
            const held = row.past + row.tokens.length;
            if (held > total) throw new Error(`present.${l} holds ${total} positions, row ${b} needs ${held}`);
            for (let h = 0; h < kvh; ++h) {
                const from = (b * kvh + h) * total * d;
                row[which][l].set(present.data.subarray(from, from + held * d), h * cap * d);
            }
        });
    }

    // input_ids (right-padded with token 0), seqlens_k, total_sequence_length, gpt2's position_ids.
    tokenFeeds(rows, width) {
        const batch = rows.length;
        const ids = new BigInt64Array(batch * width);        // [B][S]
        const positions = new BigInt64Array(batch * width);  // [B][S]
        const seqlens = new Int32Array(batch);               // [B]
        rows.forEach((row, b) => {
            const n = row.tokens.length;
            for (let s = 0; s < width; ++s) {
                ids[b * width + s] = BigInt(s < n ? row.tokens[s] : 0);
                positions[b * width + s] = BigInt(row.past + Math.min(s, n - 1));
            }
            seqlens[b] = row.past + n - 1;
        });
        const total = Math.max(...rows.map((row) => row.past + row.tokens.length));
        const feeds = {
            input_ids: new ort.Tensor("int64", ids, [batch, width]),
            seqlens_k: new ort.Tensor("int32", seqlens, [batch]),
            total_sequence_length: new ort.Tensor("int32", Int32Array.from([total]), [])
        };
        if (this.session.inputNames.includes("position_ids"))
            feeds.position_ids = new ort.Tensor("int64", positions, [batch, width]);
        return feeds;
    }
}
