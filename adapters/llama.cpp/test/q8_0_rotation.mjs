// The adapter's q8_0 snapshot where llama.cpp stores K and V
// Hadamard-rotated (head_dim a multiple of 64: state_file.mjs,
// cacheRotations). Without the rotation undone, P6 compared rotated K/V with
// the oracle's and failed at 194-440 times the bound (issue 33). Layer 0's
// K/V before the store are f32 arithmetic in every mode, so the q8_0
// snapshot must be the f32 cache's snapshot (the same model and tokens, flash
// attention on in both) up to q8_0's storage error: per head (whole rotation
// runs of n elements, an orthogonal map, so the error keeps its length)
// |q8_0 - f32|_2 <= 0.563 s sqrt(D) + f32 noise, where s = the largest
// block scale amax/127 <= |run|_2 / 127 (a rotated element is at most the
// run's length). The check is shown to catch the false alarm: the same
// snapshots with the rotation applied again (what the adapter returned
// before) must fail it. The rotation is --attn-rot on; the adapter's
// default, --attn-rot off, sets LLAMA_ATTN_ROT_DISABLE=1 in its own
// environment (llama.cpp stores K/V unrotated, and the adapter must not
// rotate them back), whatever the child inherited: each run below inherits
// the opposite value, and each mode's traits must say which it is (the
// name, and heads of 64 or more outside the limits only with the
// rotation).
//
//   node test/q8_0_rotation.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped.
import assert from "node:assert/strict";
import {existsSync, rmSync} from "node:fs";

import {cacheRotations, unrotateRuns} from "../state_file.mjs";
import {AdapterChild, modelFolder} from "./protocol_client.mjs";
import {skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/q8_0_rotation.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

const kTokens = [3, 1, 4, 1, 5];

// Layer 0's snapshot of kTokens fed in one step, per model folder, in one
// adapter mode (one child for all folders).
async function snapshots(folders, kv, env, args = []) {
    const adapter = new AdapterChild(["--export", exportTool, "--kv", kv, "--flash-attn", "on", ...args],
                                     {...process.env, ...env});
    try {
        const [{traits}] = await adapter.ok({op: "hello", protocol: 1});
        const out = [];
        out.traits = traits;
        for (const folder of folders) {
            const [{model}] = await adapter.ok({op: "load", path: folder});
            const [{engine}] = await adapter.ok({op: "create", model, capacity: 8, max_rows: 1, kv_dtype: kv});
            const [{sequence}] = await adapter.ok({op: "start", engine});
            await adapter.ok({op: "step", engine, entries: [{sequence, tokens: kTokens}]});
            out.push(await adapter.cache(engine, sequence, 0));
        }
        return out;
    } finally {
        await adapter.close();
    }
}

// The largest per-head |q8 - f32|_2 / allowed over K and V; > 1 fails.
function worstRatio(f32, q8, headDim, what) {
    let worst = 0;
    for (const part of ["k", "v"]) {
        const a = f32[part], b = q8[part];
        assert.equal(a.length, b.length, `${what} ${part}: lengths`);
        for (let base = 0; base < a.length; base += headDim) {
            let err = 0, norm = 0;
            for (let i = base; i < base + headDim; ++i) {
                err += (b[i] - a[i]) ** 2;
                norm += a[i] ** 2;
            }
            // Each run of the head is at most the head's length.
            const scale = Math.sqrt(norm) / 127;
            const allowed = 0.563 * scale * Math.sqrt(headDim) * (1 + 2 ** -10) + 1e-5 * Math.sqrt(norm) + 1e-7;
            worst = Math.max(worst, Math.sqrt(err) / allowed);
        }
    }
    return worst;
}

let failed = false;
const kHeadDims = [64, 128];
// 2 query heads over 1 KV head, so a row holds one head.
const folders = kHeadDims.map((headDim) => modelFolder(exportTool, {
    family: "llama", n_layers: 1, d_model: 8, n_heads: 2, n_kv_heads: 1, head_dim: headDim, d_ff: 8, vocab: 16,
    max_pos: 8, rope_theta: 10000, norm_eps: 1e-5, qkv_bias: false}, headDim));
try {
    const f32s = await snapshots(folders, "f32", {});
    const q8s = await snapshots(folders, "q8_0", {LLAMA_ATTN_ROT_DISABLE: "1"}, ["--attn-rot", "on"]);
    const offs = await snapshots(folders, "q8_0", {LLAMA_ATTN_ROT_DISABLE: "0"});
    assert.equal(q8s.traits.identity.name, "llama.cpp-kv-q8_0-fa-on-rot-on");
    assert.equal(q8s.traits.limits.max_head_dim, 63, "--attn-rot on: heads of 64 are rotated, outside the limits");
    assert.equal(offs.traits.identity.name, "llama.cpp-kv-q8_0-fa-on-rot-off");
    assert.equal(offs.traits.limits.max_head_dim, 65536, "--attn-rot off (the default): heads of 64 and 128 drawn");
    console.log("ok: the traits name the rotation and limit the head size only with it");
    kHeadDims.forEach((headDim, m) => {
        const [f32, q8] = [f32s[m], q8s[m]];
        assert.deepEqual(q8.positions, [0, 1, 2, 3, 4]);
        const ratio = worstRatio(f32, q8, headDim, `head_dim ${headDim}`);
        assert.ok(ratio <= 1, `head_dim ${headDim}: the q8_0 snapshot is ${ratio} times q8_0's storage error from the f32 one`);
        console.log(`ok: head_dim ${headDim}: q8_0 snapshot within ${ratio.toFixed(3)} of q8_0's storage error`);

        // What the adapter returned before: K/V rotated (K in llama.cpp's
        // stored order then; here the canonical order, another order of
        // the same run).
        const rotations = cacheRotations("q8_0", headDim, undefined);
        assert.deepEqual(rotations, {k: headDim, v: 64}, `head_dim ${headDim}: the rotations`);
        const rotated = {k: unrotateRuns(q8.k, rotations.k), v: unrotateRuns(q8.v, rotations.v)};
        const before = worstRatio(f32, rotated, headDim, "rotated");
        assert.ok(before > 10, `head_dim ${headDim}: the rotated snapshot passes the check (${before}): it cannot fail`);
        console.log(`ok: head_dim ${headDim}: the rotated snapshot fails the check (${before.toFixed(1)} times)`);

        const off = worstRatio(f32, offs[m], headDim, "--attn-rot off");
        assert.ok(off <= 1, `head_dim ${headDim}, --attn-rot off: ${off} times q8_0's storage error`);
        console.log(`ok: head_dim ${headDim}, --attn-rot off (LLAMA_ATTN_ROT_DISABLE=0 inherited): within ${off.toFixed(3)}`);
    });
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.stack ?? error.message}`);
} finally {
    for (const folder of folders) rmSync(folder, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);
