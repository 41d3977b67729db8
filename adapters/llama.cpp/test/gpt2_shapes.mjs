// Shapes llama.cpp's gpt2 cannot take are limits in the adapter's traits, so
// kvcheck never draws them (not applicable, never a failure). Before, a
// `--gpt2` campaign failed properties within 1-3 cases on them (issue 33):
// a gpt2 head of 1 aborts ggml at context creation, and a gpt2 model with
// n_heads*head_dim != d_model fails at load (kvcheck-export refuses it:
// llama.cpp's gpt2 derives its head size from d_model). Here both are shown
// to fail in llama.cpp, so the limits are needed, and the traits of `--gpt2`
// must declare them; a model inside the limits loads and steps.
//
//   node test/gpt2_shapes.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped.
import assert from "node:assert/strict";
import {existsSync, rmSync} from "node:fs";

import {AdapterChild, modelFolder} from "./protocol_client.mjs";
import {skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/gpt2_shapes.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}

const gpt2 = {family: "gpt2", n_layers: 1, d_model: 4, n_heads: 2, n_kv_heads: 2, head_dim: 2, d_ff: 4, vocab: 8,
              max_pos: 8, rope_theta: 10000, norm_eps: 1e-5, qkv_bias: false};

// Loads, creates and steps one model in a fresh child: "ok", or how it failed.
async function run(config) {
    const folder = modelFolder(exportTool, config, 1);
    const adapter = new AdapterChild(["--export", exportTool, "--gpt2"]);
    try {
        await adapter.ok({op: "hello", protocol: 1});
        const [{model}] = await adapter.ok({op: "load", path: folder});
        const [{engine}] = await adapter.ok({op: "create", model, capacity: 4, max_rows: 1, kv_dtype: "f32"});
        const [{sequence}] = await adapter.ok({op: "start", engine});
        await adapter.ok({op: "step", engine, entries: [{sequence, tokens: [1]}]});
        return "ok";
    } catch (error) {
        return error.message.split("\n")[0];
    } finally {
        await adapter.close();
        rmSync(folder, {recursive: true, force: true});
    }
}

let failed = false;
try {
    const hello = new AdapterChild(["--export", exportTool, "--gpt2"]);
    const [{traits}] = await hello.ok({op: "hello", protocol: 1});
    await hello.close();
    assert.deepEqual(traits.limits.query_width_is_d_model, ["gpt2"]);
    assert.ok(traits.limits.min_head_dim >= 2, `min_head_dim ${traits.limits.min_head_dim}`);
    console.log("ok: --gpt2 declares query_width_is_d_model [gpt2] and min_head_dim 2");

    assert.equal(await run(gpt2), "ok", "a gpt2 model inside the limits");
    console.log("ok: gpt2, 2 heads of 2 over d_model 4: loads and steps");
    const narrow = await run({...gpt2, d_model: 2, head_dim: 1});
    assert.notEqual(narrow, "ok", "a gpt2 head of 1 ran: the min_head_dim limit may be lifted");
    console.log(`ok: gpt2 head of 1 fails in llama.cpp: ${narrow.slice(0, 100)}`);
    const wide = await run({...gpt2, d_model: 8});
    assert.notEqual(wide, "ok", "n_heads*head_dim != d_model ran: the query_width_is_d_model limit may be lifted");
    console.log(`ok: gpt2 with n_heads*head_dim 4 != d_model 8 fails: ${wide.slice(0, 100)}`);
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.stack ?? error.message}`);
}
process.exit(failed ? 1 : 0);
