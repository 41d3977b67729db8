// kvcheck's GGUF files read back by node-llama-cpp's own GGUF parser
// (readGgufFileInfo), so that a mistake in kvcheck's writer is not hidden by
// a reader that shares it. Each case writes a file with kvcheck-export and
// checks version, architecture, hyperparameters, tokenizer and every tensor's
// name, shape, type and offset against what the config implies.
//
//   node test/gguf_readback.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped
// (node-llama-cpp is not installed: run ci/setup).
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {existsSync, mkdtempSync, readFileSync, rmSync} from "node:fs";
import {tmpdir} from "node:os";
import {join} from "node:path";

import {adapterDir, skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const adapter = adapterDir;
const {readGgufFileInfo} = await import("node-llama-cpp");

const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/gguf_readback.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

const cases = [
    {name: "llama GQA", flags: ["--family", "llama", "--vocab", "256", "--n-kv-heads", "2"]},
    {name: "llama MQA, H*D != E", flags: ["--family", "llama", "--vocab", "256", "--n-kv-heads", "1", "--head-dim", "16"]},
    {name: "llama vocab 300", flags: ["--family", "llama", "--vocab", "300", "--rope-theta", "500000"]},
    {name: "gpt2 GQA, no qkv bias", flags: ["--family", "gpt2", "--vocab", "256", "--n-kv-heads", "2"]},
    {name: "gpt2 MHA, qkv bias", flags: ["--family", "gpt2", "--vocab", "64", "--qkv-bias", "true"]}
];

// Every tensor the config implies, as [name, ggml dimensions (innermost first)].
function expectedTensors(c) {
    const E = c.d_model, F = c.d_ff, V = c.vocab, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim;
    const gpt2 = c.family === "gpt2";
    const t = [["token_embd.weight", [E, V]]];
    if (gpt2) t.push(["position_embd.weight", [E, c.max_pos]]);
    for (let l = 0; l < c.n_layers; l++) {
        const p = `blk.${l}.`;
        t.push([p + "attn_norm.weight", [E]]);
        if (gpt2) {
            t.push([p + "attn_norm.bias", [E]], [p + "attn_qkv.weight", [E, Q + 2 * KV]],
                [p + "attn_qkv.bias", [Q + 2 * KV]], [p + "attn_output.weight", [Q, E]],
                [p + "attn_output.bias", [E]], [p + "ffn_norm.weight", [E]], [p + "ffn_norm.bias", [E]],
                [p + "ffn_up.weight", [E, F]], [p + "ffn_up.bias", [F]], [p + "ffn_down.weight", [F, E]],
                [p + "ffn_down.bias", [E]]);
        } else {
            t.push([p + "attn_q.weight", [E, Q]], [p + "attn_k.weight", [E, KV]], [p + "attn_v.weight", [E, KV]],
                [p + "attn_output.weight", [Q, E]], [p + "ffn_norm.weight", [E]], [p + "ffn_gate.weight", [E, F]],
                [p + "ffn_up.weight", [E, F]], [p + "ffn_down.weight", [F, E]]);
        }
    }
    t.push(["output_norm.weight", [E]]);
    if (gpt2) t.push(["output_norm.bias", [E]]);
    t.push(["output.weight", [E, V]]);
    return t;
}

function checkHyperparameters(info, c) {
    const arch = info.metadata.general.architecture;
    assert.equal(arch, c.family);
    assert.equal(info.metadata.general.alignment, 32);
    const a = info.architectureMetadata;
    assert.equal(a.context_length, c.max_pos);
    assert.equal(a.embedding_length, c.d_model);
    assert.equal(a.block_count, c.n_layers);
    assert.equal(a.feed_forward_length, c.d_ff);
    assert.equal(a.attention.head_count, c.n_heads);
    assert.equal(a.attention.head_count_kv, c.n_kv_heads);
    const f32 = Math.fround;
    if (arch === "gpt2") {
        assert.equal(a.attention.layer_norm_epsilon, f32(c.norm_eps));
        return;
    }
    assert.equal(a.attention.layer_norm_rms_epsilon, f32(c.norm_eps));
    assert.equal(a.rope.freq_base, f32(c.rope_theta));
    assert.equal(a.rope.dimension_count, c.head_dim);
    const needsHeadSize = c.n_heads * c.head_dim !== c.d_model;
    assert.equal(a.attention.key_length, needsHeadSize ? c.head_dim : undefined);
    assert.equal(a.attention.value_length, needsHeadSize ? c.head_dim : undefined);
}

function checkTokenizer(info, c) {
    const t = info.metadata.tokenizer.ggml;
    assert.equal(t.model, "gpt2");
    assert.deepEqual(t.merges, []);
    assert.equal(t.tokens.length, c.vocab);
    assert.equal(t.token_type.length, c.vocab);
    assert.equal(new Set(t.tokens).size, c.vocab, "token texts are unique");
    // GPT-2's byte symbols: printable ASCII is itself, '\n' is U+010A.
    assert.equal(t.tokens[33], "!");
    if (c.vocab > 10) assert.equal(t.tokens[10], "\u010A");
    if (c.vocab > 256) assert.equal(t.tokens[256], "<|kvcheck_256|>");
}

function checkTensors(info, c) {
    const want = expectedTensors(c);
    assert.deepEqual(info.tensorInfo.map((t) => t.name).sort(), want.map(([name]) => name).sort());
    const byName = new Map(info.tensorInfo.map((t) => [t.name, t]));
    for (const [name, dims] of want) {
        const t = byName.get(name);
        assert.deepEqual(t.dimensions.map(Number), dims, name);
        assert.equal(t.ggmlType, 0, `${name} is f32`);
        assert.equal(Number(t.offset) % 32, 0, `${name} offset is 32-aligned`);
        assert.equal(Number(t.fileOffset) % 32, 0, `${name} file offset is 32-aligned`);
    }
    // Back to back in file order: each tensor starts where the previous one's padded data ends.
    let next = 0;
    for (const t of info.tensorInfo) {
        assert.equal(Number(t.offset), next, t.name);
        next += Math.ceil(4 * t.dimensions.reduce((a, b) => a * Number(b), 1) / 32) * 32;
    }
}

const dir = mkdtempSync(join(tmpdir(), "kvcheck-gguf-readback-"));
let failed = 0;
try {
    for (const {name, flags} of cases) {
        const path = join(dir, "model.gguf");
        try {
            const config = JSON.parse(execFileSync(exportTool, [...flags, "--seed", "3", "--out", path], {encoding: "utf8"}));
            const info = await readGgufFileInfo(path, {logWarnings: false});
            assert.equal(info.version, 3);
            checkHyperparameters(info, config);
            checkTokenizer(info, config);
            checkTensors(info, config);
            assert.deepEqual(JSON.parse(info.metadata.kvcheck.config), config);
            // The adapter's route (engine.mjs load): safetensors -> --from -> GGUF
            // must give the very bytes of the direct export.
            const st = join(dir, "model.safetensors"), converted = join(dir, "converted.gguf");
            execFileSync(exportTool, [...flags, "--seed", "3", "--out", st]);
            execFileSync(exportTool, ["--from", st, "--out", converted]);
            assert.ok(readFileSync(converted).equals(readFileSync(path)), "--from differs from the direct GGUF export");
            console.log(`ok   ${name}: ${info.tensorInfo.length} tensors, --from gives the same bytes`);
        } catch (error) {
            failed++;
            console.log(`FAIL ${name}: ${error.message}`);
        }
    }
} finally {
    rmSync(dir, {recursive: true, force: true});
}
console.log(failed === 0 ? "all cases held" : `${failed} case(s) failed`);
process.exit(failed === 0 ? 0 : 1);
