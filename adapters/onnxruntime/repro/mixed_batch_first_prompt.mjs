// Reproduction for docs/findings/onnxruntime_gqa_mixed_batch_first_prompt.md:
// com.microsoft GroupQueryAttention (CPU, onnxruntime-node 1.30.0) decides
// "first prompt" for the whole call from sequence_length ==
// total_sequence_length. A batch that holds a new prompt of S tokens and a
// decode row whose past + 1 <= S passes the input check, and the decode row
// is then computed as a new prompt: its past K/V and its position are ignored.
//
//   build/release/tools/kvcheck-export --family llama --n-layers 1 --n-kv-heads 1 --head-dim 16 --vocab 16 --out /tmp/gqa.onnx
//   node adapters/onnxruntime/repro/mixed_batch_first_prompt.mjs /tmp/gqa.onnx
//
// The graph (model/onnx_model.h): input_ids [B][S], seqlens_k [B],
// total_sequence_length [], past_key_values.0.key/value [B][KVH][P][D] ->
// logits [B][S][V], present.0.key/value. Row B is token 4 then token 5;
// its logits for token 5 are computed (a) as a decode alone, batch 1, and
// (b) in one call beside row A, a new prompt of 3 tokens (1 2 3).
// Exit codes: 0 printed, 2 bad arguments.
import ort from "onnxruntime-node";

const [file] = process.argv.slice(2);
if (file == null) {
    console.error("usage: mixed_batch_first_prompt.mjs MODEL.onnx");
    process.exit(2);
}
const session = await ort.InferenceSession.create(file, {intraOpNumThreads: 1});
const kvHeads = 1, headDim = 16;  // the export command above

// One call: rows [{tokens, past: {k, v} [KVH][P][D] or null, pastLength}].
async function run(rows) {
    const batch = rows.length, width = Math.max(...rows.map((r) => r.tokens.length));
    const pastMax = Math.max(...rows.map((r) => r.pastLength));
    const ids = new BigInt64Array(batch * width), seqlens = new Int32Array(batch);
    const pk = new Float32Array(batch * kvHeads * pastMax * headDim), pv = new Float32Array(pk.length);
    rows.forEach((r, b) => {
        r.tokens.forEach((t, s) => (ids[b * width + s] = BigInt(t)));
        seqlens[b] = r.pastLength + r.tokens.length - 1;
        for (let h = 0; h < kvHeads; ++h) {
            const from = h * r.pastLength * headDim, to = (b * kvHeads + h) * pastMax * headDim;
            if (r.past) pk.set(r.past.k.subarray(from, from + r.pastLength * headDim), to);
            if (r.past) pv.set(r.past.v.subarray(from, from + r.pastLength * headDim), to);
        }
    });
    const total = Math.max(...rows.map((r) => r.pastLength + r.tokens.length));
    const dims = [batch, kvHeads, pastMax, headDim];
    return session.run({
        input_ids: new ort.Tensor("int64", ids, [batch, width]),
        seqlens_k: new ort.Tensor("int32", seqlens, [batch]),
        total_sequence_length: new ort.Tensor("int32", Int32Array.from([total]), []),
        "past_key_values.0.key": new ort.Tensor("float32", pk, dims),
        "past_key_values.0.value": new ort.Tensor("float32", pv, dims)
    });
}

// Row B's first token alone: its K/V become the past of its second token.
const first = await run([{tokens: [4], past: null, pastLength: 0}]);
if (first["present.0.key"].dims.join() !== [1, kvHeads, 1, headDim].join()) {
    console.error(`expected present.0.key [1][${kvHeads}][1][${headDim}]: export the model as the header says`);
    process.exit(2);
}
const past = {k: first["present.0.key"].data, v: first["present.0.value"].data};
const vocab = first.logits.dims[2];

const alone = await run([{tokens: [5], past, pastLength: 1}]);
const mixed = await run([{tokens: [1, 2, 3], past: null, pastLength: 0}, {tokens: [5], past, pastLength: 1}]);
const a = alone.logits.data.subarray(0, vocab);
const m = mixed.logits.data.subarray(3 * vocab, 4 * vocab);  // row 1, position 0
const fresh = (await run([{tokens: [5], past: null, pastLength: 0}])).logits.data.subarray(0, vocab);
const diff = (x, y) => Math.max(...Array.from(x, (v, i) => Math.abs(v - y[i])));
console.log(`onnxruntime-node ${ort.env.versions?.node ?? "?"}`);
console.log(`row B token 5: decode alone vs the same row beside a 3-token prompt: max |difference| ${diff(a, m).toExponential(3)}`);
console.log(`row B token 5 beside the prompt vs token 5 as a new 1-token prompt: max |difference| ${diff(fresh, m).toExponential(3)}`);
