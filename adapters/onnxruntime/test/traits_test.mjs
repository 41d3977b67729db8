// Holds adapters/onnxruntime/traits.mjs to what ONNX Runtime's
// GroupQueryAttention itself does, by calling the operator directly (through
// gqa_model.mjs, no kvcheck in between) on models kvcheck-export writes:
//   - every invariance declared bitwise gives the same bits (batch: a row
//     alone and beside others of other lengths; reset/compaction: a row on a
//     fresh session and after other calls; determinism: twice), and chunking,
//     declared bounded, does differ (so "bitwise" would be a false claim);
//   - sliding_window: local_window_size = W masks exactly kvcheck's window
//     (equal to full attention before position W, different at W);
//   - the call plan follows the operator's input rules: a batch of chunks
//     after a past is refused by the operator itself, the plan never makes one;
//   - --buffer shared reaches the operator's past_present_share_buffer path.
//
//   node adapters/onnxruntime/test/traits_test.mjs KVCHECK_EXPORT
//
// Exit codes: 0 every check held, 1 one failed, 77 skipped (no Node 20 or no
// onnxruntime-node, or kvcheck-export writes no ONNX).
import {execFileSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import {adapterDir, skipUnlessPackage} from "./requirements.mjs";

skipUnlessPackage();
const {GqaModel, planCalls} = await import(path.join(adapterDir, "gqa_model.mjs"));
const {traitsFor} = await import(path.join(adapterDir, "traits.mjs"));

const [exporter] = process.argv.slice(2);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "kvcheck-ort-traits-"));
let failed = 0;
function check(ok, what) {
    console.log(`${ok ? "ok" : "FAILED"}: ${what}`);
    if (!ok) failed += 1;
}

const base = {family: "llama", n_layers: 2, d_model: 16, n_heads: 4, n_kv_heads: 2, head_dim: 16, d_ff: 24,
              vocab: 32, max_pos: 32, rope_theta: 10000, norm_eps: 1e-5, qkv_bias: false};
async function model(name, fields = {}) {
    const config = {...base, ...fields};
    const folder = path.join(dir, name);
    fs.mkdirSync(folder);
    fs.writeFileSync(path.join(folder, "config.json"), JSON.stringify(config));
    try {
        execFileSync(exporter, ["--config", path.join(folder, "config.json"), "--seed", "7", "--out", path.join(folder, "model.onnx")],
            {stdio: ["ignore", "ignore", "pipe"]});
    } catch (error) {
        console.log(`SKIPPED: ${exporter} writes no ONNX: ${error.stderr ?? error.message}`);
        process.exit(77);
    }
    return GqaModel.open(path.join(folder, "model.onnx"), config, {threads: 1, optimization: "all"});
}

const cap = 16;
function row(m, tokens) {
    const {n_layers: layers, n_kv_heads: kvh, head_dim: d} = m.config;
    const r = {tokens, past: 0, k: [], v: []};
    for (let l = 0; l < layers; ++l) {
        r.k.push(new Float32Array(kvh * cap * d));
        r.v.push(new Float32Array(kvh * cap * d));
    }
    return r;
}
// Feeds chunks to one fresh row, each chunk one call; logits of every position [T][V].
async function feed(m, chunks) {
    const r = row(m, []);
    const out = [];
    for (const tokens of chunks) {
        r.tokens = tokens;
        const [logits] = await m.run([r], cap);
        out.push(...logits);
        r.past += tokens.length;
    }
    return {logits: Float32Array.from(out), row: r};
}
const same = (a, b) => a.length === b.length && a.every((x, i) => Object.is(x, b[i]));

const traits = traitsFor({declare: "measured", calls: "grouped", buffer: "separate", window: true, gpt2: false});
const m = await model("gqa");
const vocab = m.config.vocab;
const tokens = [3, 1, 4, 1, 5, 9, 2, 6];

// chunking: declared bounded, and the operator's prompt and decode paths differ.
const whole = await feed(m, [tokens]);
const single = await feed(m, tokens.map((t) => [t]));
check(traits.invariance.chunking === "bounded" && !same(whole.logits, single.logits),
      `chunking is bounded: 8 tokens in one call and one by one differ (max ${Math.max(...whole.logits.map((x, i) => Math.abs(x - single.logits[i]))).toExponential(2)})`);

// determinism: the same calls twice give the same bits.
check(traits.invariance.determinism === "bitwise" && same(whole.logits, (await feed(m, [tokens])).logits),
      "determinism is bitwise: the same prompt twice");

// batch: a decode beside others of other past lengths, a prompt beside a longer one.
{
    const a = (await feed(m, [tokens.slice(0, 5)])).row, b = (await feed(m, [tokens.slice(0, 2)])).row;
    const alone = (await feed(m, [tokens.slice(0, 5), [7]])).logits.slice(5 * vocab);
    a.tokens = [7];
    b.tokens = [8];
    const [beside] = await m.run([a, b], cap);
    const short = await feed(m, [[5, 6, 7]]);
    const [prompt] = await m.run([row(m, [5, 6, 7]), row(m, tokens)], cap);
    check(traits.invariance.batch === "bitwise" && same(alone, beside) && same(short.logits, prompt),
          "batch is bitwise: a decode beside a row of another past, a prompt padded beside a longer one");
}

// reset / compaction: the operator keeps nothing between calls, so a row's
// logits after other rows' calls (finished or reset) equal a fresh session's.
{
    const fresh = await model("gqa-fresh");
    const after = await feed(m, [tokens.slice(0, 3), tokens.slice(3)]);
    const first = await feed(fresh, [tokens.slice(0, 3), tokens.slice(3)]);
    check(traits.invariance.reset === "bitwise" && traits.invariance.compaction === "bitwise" && same(after.logits, first.logits),
          "reset and compaction are bitwise: a row after other calls equals a fresh session's");
}

// sliding_window: local_window_size = W sees the last W positions, itself included.
{
    const w = 3;
    const windowed = await model("window", {sliding_window: w});
    for (const chunks of [[tokens], tokens.map((t) => [t])]) {
        const got = (await feed(windowed, chunks)).logits, full = (await feed(m, chunks)).logits;
        const equal = (p) => same(got.slice(p * vocab, (p + 1) * vocab), full.slice(p * vocab, (p + 1) * vocab));
        const before = [...Array(w).keys()].every(equal);
        check(traits.operations.sliding_window && before && !equal(w),
              `sliding_window W=${w} (${chunks.length} calls): positions 0..${w - 1} equal full attention, position ${w} differs`);
    }
}

// The call plan: the operator refuses a batch of chunks after a past itself,
// and the plan gives such chunks a call of their own.
{
    const a = (await feed(m, [[1, 2]])).row, b = (await feed(m, [[3]])).row;
    a.tokens = [4, 5];
    b.tokens = [6, 7];
    let refused = "";
    try {
        await m.run([a, b], cap);
    } catch (error) {
        refused = String(error?.message);
    }
    const plan = planCalls([{past: 0, n: 3}, {past: 2, n: 1}, {past: 2, n: 2}, {past: 0, n: 1}, {past: 1, n: 3}]);
    check(/batch_size must be 1/.test(refused) && JSON.stringify(plan) === "[[0,3],[1],[2],[4]]",
          `a batch of two chunks after a past is refused by the operator (${refused.split("\n")[0].slice(0, 90)}...); the plan is ${JSON.stringify(plan)}`);
}

// --buffer shared: one tensor bound as past and present is the operator's
// past_present_share_buffer path (it writes into the input and leaves
// positions past the row's length alone; a separate present is zeroed first).
{
    const marked = (shared) => {
        const r = row(m, [1, 2]);
        const out = {};
        const feeds = m.tokenFeeds([r], 2);
        const fetches = {logits: null};
        for (let l = 0; l < m.config.n_layers; ++l) {
            for (const [which, name] of [["k", "key"], ["v", "value"]]) {
                const tensor = m.pastTensor([r], cap, cap, which, l);
                tensor.data.fill(7);
                feeds[`past_key_values.${l}.${name}`] = tensor;
                fetches[`present.${l}.${name}`] = shared ? tensor : null;
                out[`${l}.${name}`] = tensor;
            }
        }
        return m.session.run(feeds, fetches).then((result) => {
            const present = result["present.0.key"].data, input = out["0.key"].data;
            const d = m.config.head_dim;
            return {tail: present[(cap - 1) * d], input: input[0]};
        });
    };
    const separate = await marked(false), shared = await marked(true);
    check(separate.tail === 0 && separate.input === 7 && shared.tail === 7 && shared.input !== 7,
          `--buffer shared takes the operator's shared path (separate: present zeroed past the row, input untouched; shared: ${shared.tail}, input overwritten)`);
}

// Operations the operator does not have are not declared.
check(!traits.operations.fork && !traits.operations.truncate && !traits.operations.erase && !traits.operations.shift,
      "fork, truncate, erase and shift are not declared (the operator has none; slicing a past tensor would test the adapter)");

fs.rmSync(dir, {recursive: true, force: true});
console.log(failed === 0 ? "all trait checks held" : `${failed} trait check(s) failed`);
process.exit(failed === 0 ? 0 : 1);
