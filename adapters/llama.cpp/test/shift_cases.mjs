// Writes random P1 case files that erase and shift on llama.cpp, for
// `kvcheck replay` of the folder (docs/LLAMA_CPP.md, "Erase and shift").
// kvcheck's generator draws only the context-shift pattern (an erase of
// [k, k + n) then a shift of the rest by -n, or an erase of the tail), and
// rarely; these cases also leave gaps, shift ranges alone by either sign
// (positions out of slot order), shift twice before a step, and fork or
// truncate a shifted sequence. Every call is valid by docs/OPERATIONS.md (the
// script keeps the cells as kvcheck does), so kvcheck runs all of them.
//
//   node adapters/llama.cpp/test/shift_cases.mjs OUT_DIR COUNT SEED
//   kvcheck replay --backend 'exec:node adapters/llama.cpp/engine.mjs' OUT_DIR
//
// Exit codes: 0 written, 2 bad arguments.
import fs from "node:fs";
import path from "node:path";

const [out, countText, seedText] = process.argv.slice(2);
const count = Number(countText), seed = Number(seedText);
if (out == null || !Number.isInteger(count) || count < 1 || !Number.isInteger(seed)) {
    console.error("usage: node shift_cases.mjs OUT_DIR COUNT SEED");
    process.exit(2);
}
console.log(`shift_cases: seed ${seed}, ${count} cases in ${out}`);

// SplitMix64 (as kvcheck's RNG), for a reproducible set from the seed.
let state = BigInt.asUintN(64, BigInt(seed));
function next() {
    state = BigInt.asUintN(64, state + 0x9e3779b97f4a7c15n);
    let z = state;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    return z ^ (z >> 31n);
}
const below = (n) => Number(next() % BigInt(n));  // [0, n)
const pick = (list) => list[below(list.length)];

const kVocab = 16;
fs.mkdirSync(out, {recursive: true});
for (let c = 0; c < count; ++c) {
    const nHeads = pick([1, 2, 4]);
    const nKvHeads = pick([1, 2, 4].filter((k) => nHeads % k === 0));
    const model = {n_layers: 1 + below(2), d_model: 8, n_heads: nHeads, n_kv_heads: nKvHeads,
                   head_dim: pick([2, 4, 8]), d_ff: 8, max_pos: 16 + below(17), weight_seed: below(1000)};
    const capacity = 6 + below(7);
    // cells[s]: positions in slot order; tokens[s]: the tokens fed to s.
    const cells = [[]], tokens = [[]], calls = ["start s0"];
    const nextPos = (s) => cells[s].reduce((m, p) => Math.max(m, p + 1), 0);
    const feed = (s) => {
        const room = Math.min(capacity - cells[s].length, model.max_pos - nextPos(s));
        if (room < 1) return false;
        const n = 1 + below(Math.min(3, room));
        const first = nextPos(s);
        for (let i = 0; i < n; ++i) {
            cells[s].push(first + i);
            tokens[s].push(below(kVocab));
        }
        calls.push(`step s${s}:${n}`);
        return true;
    };
    const erase = (s) => {
        const top = nextPos(s) + 1;
        const p0 = below(top), p1 = p0 + below(top - p0 + 1);
        cells[s] = cells[s].filter((p) => p < p0 || p >= p1);
        calls.push(`erase s${s} ${p0} ${p1}`);
    };
    const shift = (s) => {
        for (let tries = 0; tries < 20; ++tries) {
            const top = nextPos(s) + 1;
            const p0 = below(top), p1 = p0 + 1 + below(Math.max(1, top - p0));
            const delta = below(2 * model.max_pos) - model.max_pos;
            const moved = cells[s].map((p) => (p >= p0 && p < p1 ? p + delta : p));
            const valid = moved.every((p) => p >= 0 && p < model.max_pos) && new Set(moved).size === moved.length;
            if (!valid || delta === 0 || !cells[s].some((p) => p >= p0 && p < p1)) continue;
            cells[s] = moved;
            calls.push(`shift s${s} ${p0} ${p1} ${delta}`);
            return;
        }
    };
    const contextShift = (s) => {
        const held = nextPos(s);
        if (held < 2) return;
        const k = below(held - 1), n = 1 + below(held - 1 - k);
        cells[s] = cells[s].filter((p) => p < k || p >= k + n);
        calls.push(`erase s${s} ${k} ${k + n}`);
        cells[s] = cells[s].map((p) => (p >= k + n ? p - n : p));
        calls.push(`shift s${s} ${k + n} ${model.max_pos} ${-n}`);
    };
    feed(0);
    feed(0);
    let forked = false;
    for (let round = 0; round < 4 + below(4); ++round) {
        const s = forked && below(2) === 1 ? 1 : 0;
        const op = below(10);
        if (op < 3) contextShift(s);
        else if (op < 5) erase(s);
        else if (op < 8) {
            shift(s);
            if (below(3) === 0) shift(s);  // two shifts before the next decode
        }
        else if (op === 8 && cells[s].length > 0) {
            const n = 1 + below(cells[s].length);
            cells[s] = cells[s].slice(0, cells[s].length - n);
            calls.push(`truncate s${s} ${n}`);
        } else if (!forked && cells[0].length > 0) {
            const n = 1 + below(cells[0].length);
            cells.push(cells[0].slice(0, n));
            tokens.push([]);
            calls.push(`fork s1 s0 ${n}`);
            forked = true;
        }
        feed(s);
    }
    // P1 judges the logits of fed tokens: every sequence ends with a step.
    for (let s = 0; s < cells.length; ++s) feed(s);
    const lines = [
        "kvcheck-case 1",
        `note written by adapters/llama.cpp/test/shift_cases.mjs ${out} ${count} ${seed} (case ${c})`,
        "property oracle", "fault none", "backend exec:node adapters/llama.cpp/engine.mjs",
        "engine llama.cpp-kv-f32-fa-off node-llama-cpp 3.22.1", "",
        "# model", "family llama", `n_layers ${model.n_layers}`, `d_model ${model.d_model}`,
        `n_heads ${model.n_heads}`, `n_kv_heads ${model.n_kv_heads}`, `head_dim ${model.head_dim}`,
        `d_ff ${model.d_ff}`, `vocab ${kVocab}`, `max_pos ${model.max_pos}`, "rope_theta 10000",
        "norm_eps 1e-05", "qkv_bias false", `weight_seed ${model.weight_seed}`, "",
        "# engine", `capacity ${capacity}`, `max_rows ${cells.length}`, "kv_dtype f32", "",
        "# sequences: token ids in feed order",
        ...tokens.map((t, s) => `sequence s${s}: ${t.join(" ")}`), "",
        "# schedule: one engine call per line, in order", ...calls, ""
    ];
    fs.writeFileSync(path.join(out, `shift_${seed}_${c}.case`), lines.join("\n"));
}
