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

// `kvcheck-export --from DIR/model.safetensors --out FILE.onnx` (one ONNX writer).
export function exportOnnx(exporter, folder, file) {
    try {
        execFileSync(exporter, ["--from", path.join(folder, "model.safetensors"), "--out", file],
            {stdio: ["ignore", "ignore", "pipe"]});
    } catch (error) {
        throw new Error(`kvcheck-export --from ${folder}/model.safetensors --out ${file} failed: ${error.stderr ?? error.message}`);
    }
}

// Groups of row indices that one GroupQueryAttention call may hold; `rows`
// are {past, n}. mode "grouped" (default) or "separate" (every row alone).
export function planCalls(rows, mode = "grouped") {
    if (mode === "separate") return rows.map((_, i) => [i]);
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
    async run(rows, cap) {
        const {n_layers: layers, n_kv_heads: kvh, head_dim: d, vocab} = this.config;
        const batch = rows.length;
        const width = Math.max(...rows.map((row) => row.tokens.length));
        const pastMax = Math.max(...rows.map((row) => row.past));
        const feeds = this.tokenFeeds(rows, width);
        for (let l = 0; l < layers; ++l) {
            for (const which of ["key", "value"]) {
                const past = new Float32Array(batch * kvh * pastMax * d);  // [B][KVH][P][D]
                rows.forEach((row, b) => {
                    const store = which === "key" ? row.k[l] : row.v[l];
                    for (let h = 0; h < kvh; ++h)
                        past.set(store.subarray(h * cap * d, (h * cap + row.past) * d), (b * kvh + h) * pastMax * d);
                });
                feeds[`past_key_values.${l}.${which}`] = new ort.Tensor("float32", past, [batch, kvh, pastMax, d]);
            }
        }
        const out = await this.session.run(feeds);
        for (let l = 0; l < layers; ++l) {
            for (const which of ["key", "value"]) {
                const present = out[`present.${l}.${which}`];  // [B][KVH][T][D]
                const total = present.dims[2];
                rows.forEach((row, b) => {
                    const store = which === "key" ? row.k[l] : row.v[l];
                    const held = row.past + row.tokens.length;
                    if (held > total) throw new Error(`present.${l}.${which} holds ${total} positions, row ${b} needs ${held}`);
                    for (let h = 0; h < kvh; ++h) {
                        const from = (b * kvh + h) * total * d;
                        store.set(present.data.subarray(from, from + held * d), h * cap * d);
                    }
                });
            }
        }
        const logits = out.logits.data;  // [B][S][V]
        return rows.map((row, b) => logits.slice(b * width * vocab, (b * width + row.tokens.length) * vocab));
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
