// Why the Node adapter refuses a step past capacity itself and cannot leave
// it to llama.cpp (docs/LLAMA_CPP.md, "llama.cpp's capacity refusal in the
// Node adapter"). Three observations on node-llama-cpp 3.22.1, each asserted,
// so that this test fails (and the adapter may change) when one stops holding:
//  1. Each sequence is a KV stream of its own (kv_unified = false) of at least
//     256 cells: a context of contextSize 8 and 2 sequences has llama_n_ctx
//     512, and llama.cpp takes 256 tokens into one sequence's stream through
//     the addon's batch calls.
//  2. The 257th is llama.cpp's refusal: llama_decode returns 1, which the
//     addon's decodeBatch surfaces as a rejected promise with "could not find
//     a KV slot for the batch" (AddonContext.cpp, AddonContextDecodeBatchWorker).
//  3. Through the public API llama.cpp never sees a sequence past
//     contextSize - 1 tokens: LlamaContextSequence._decodeTokens decodes the
//     tokens that fit, then calls the context-shift strategy (which the
//     adapter makes throw) for the rest, so a step past the limit is partly
//     decoded before it is refused.
// A stream holds only its own sequence's cells (llama-kv-cache.cpp: a copy
// across streams relabels them, find_slot asserts one seq id per token), so
// no filler can narrow a stream below 256 without entering the sequence's
// own attention: llama.cpp can refuse at a capacity of 256 cells, never at
// the capacities kvcheck draws.
//
//   node test/capacity_refusal.mjs PATH/TO/kvcheck-export
//
// Exit codes: 0 all held, 1 a check failed, 2 bad arguments, 77 skipped
// (Node older than 20, or node-llama-cpp not installed: run ci/setup).
import assert from "node:assert/strict";
import {execFileSync} from "node:child_process";
import {existsSync, mkdtempSync, rmSync} from "node:fs";
import os from "node:os";
import path from "node:path";

import {skipUnlessNodeLlamaCpp} from "./requirements.mjs";

skipUnlessNodeLlamaCpp();
const exportTool = process.argv[2];
if (exportTool == null || !existsSync(exportTool)) {
    console.error("usage: node test/capacity_refusal.mjs PATH/TO/kvcheck-export");
    process.exit(2);
}
const {getLlama, LlamaLogLevel} = await import("node-llama-cpp");

const scratch = mkdtempSync(path.join(os.tmpdir(), "kvcheck-capacity-"));
const gguf = path.join(scratch, "m.gguf");
execFileSync(exportTool, ["--family", "llama", "--max-pos", "16", "--out", gguf], {stdio: "ignore"});

// Tokens 1, 2, ... at positions from `first` in llama seq `seq`, through the
// addon's own batch calls (what the dispatcher calls; private in 3.22.1).
async function decodeRaw(context, seq, first, n) {
    const tokens = Uint32Array.from({length: n}, (_, i) => 1 + ((first + i) % 15));
    context._ctx.initBatch(n);
    context._ctx.addToBatch(seq, first, tokens, Uint32Array.from([n - 1]));
    await context._ctx.decodeBatch();
}

let failed = false;
const llama = await getLlama({build: "never", gpu: false, logLevel: LlamaLogLevel.disabled});
const model = await llama.loadModel({modelPath: gguf, gpuLayers: 0, ignoreMemorySafetyChecks: true});
try {
    // 1 and 2: the stream of one sequence, through the addon.
    const raw = await model.createContext({contextSize: 8, sequences: 2, batchSize: 512, threads: 1});
    const cells = raw._ctx.getContextSize();
    assert.equal(cells, 512, "llama_n_ctx of contextSize 8 x 2 sequences");
    const sequence = raw.getSequence();
    const seq = sequence._sequenceId;
    await decodeRaw(raw, seq, 0, 256);
    assert.equal(raw._ctx.getSequenceKvCacheMaxPosition(seq), 255, "the stream took 256 cells");
    await assert.rejects(decodeRaw(raw, seq, 256, 1), /could not find a KV slot for the batch/,
                         "the 257th cell of a stream");
    assert.equal(raw._ctx.getSequenceKvCacheMaxPosition(seq), 255, "the refused decode changed the stream");
    await decodeRaw(raw, 1 - seq, 0, 256);  // the other stream still has its own 256
    console.log(`ok: contextSize 8 x 2 sequences: llama_n_ctx ${cells}, a stream of 256 cells, ` +
                "the 257th refused by llama_decode as \"could not find a KV slot for the batch\"");
    await raw.dispose();

    // 3: the public API stops at contextSize - 1 before llama.cpp sees more.
    const context = await model.createContext({contextSize: 8, sequences: 1, batchSize: 512, threads: 1});
    let shifted = 0;
    const strategy = () => {
        ++shifted;
        throw new Error("context shift is disabled");
    };
    const seq8 = context.getSequence({contextShift: {strategy}});
    const tokens = Array.from({length: 10}, (_, i) => [1 + i, {generateNext: {logits: true}}]);
    await assert.rejects(seq8.controlledEvaluate(tokens), /context shift is disabled/);
    assert.equal(shifted, 1, "the context-shift strategy was not what refused");
    const held = context._ctx.getSequenceKvCacheMaxPosition(seq8._sequenceId) + 1;
    assert.equal(held, 7, "cells decoded before the refusal");
    console.log(`ok: contextSize 8: 10 tokens through controlledEvaluate: ${held} decoded, ` +
                "then the context-shift strategy refused the rest (llama.cpp never saw them)");
    await context.dispose();
} catch (error) {
    failed = true;
    console.error(`FAILED: ${error.message}`);
} finally {
    await model.dispose();
    rmSync(scratch, {recursive: true, force: true});
}
process.exit(failed ? 1 : 0);
