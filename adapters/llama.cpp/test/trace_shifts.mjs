// Which shifts a campaign sent llama.cpp: reads the adapter's diagnostic
// trace (KVCHECK_LLAMA_TRACE=FILE, engine.mjs) and prints the accepted
// shifts by form (the context-shift pattern: a shift that closes the gap of
// the erase just before it on the same sequence; else down or up), by
// delta and by the width p1 - p0 of the range (the tail's p1 is a position
// limit, so a wide range is a tail). Measures docs/LLAMA_CPP.md, "Which
// shifts a campaign draws".
//   KVCHECK_LLAMA_TRACE=t.jsonl kvcheck campaign --backend 'exec:node adapters/llama.cpp/engine.mjs' ...
//   node adapters/llama.cpp/test/trace_shifts.mjs t.jsonl
import fs from "node:fs";

const count = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);
const forms = new Map(), deltas = new Map(), widths = new Map();
const lastErase = new Map();  // "engine/sequence" -> [p0, p1] of an erase not yet followed
let shifts = 0;
for (const line of fs.readFileSync(process.argv[2], "utf8").split("\n")) {
    if (!line) continue;
    const r = JSON.parse(line);
    const key = `${r.engine}/${r.sequence}`;
    if (r.op === "erase" && r.result === "ok") {
        lastErase.set(key, [r.p0, r.p1]);
        continue;
    }
    const erase = lastErase.get(key);
    lastErase.delete(key);
    if (r.op !== "shift" || r.result !== "ok") continue;
    ++shifts;
    const d = r.delta, w = r.p1 - r.p0;
    const closes = erase && r.p0 === erase[1] && d === erase[0] - erase[1];
    count(forms, closes ? "context shift" : d < 0 ? "other, down" : "other, up");
    count(deltas, d === -1 ? "-1" : d < 0 ? "<= -2" : d === 1 ? "+1" : d <= 8 ? "+2..+8" : ">= +9");
    count(widths, w === 1 ? "1" : w <= 4 ? "2..4" : w <= 16 ? "5..16" : "17+");
}
console.log(`${shifts} shifts`);
for (const [name, map] of [["form", forms], ["delta", deltas], ["width", widths]]) {
    const parts = [...map].sort().map(([k, v]) => `${k} ${v} (${Math.round(100 * v / Math.max(shifts, 1))} %)`);
    console.log(`${name}: ${parts.join(", ")}`);
}
