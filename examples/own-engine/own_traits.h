// What the example engine declares, once, in the JSON form kvcheck reads
// (docs/ENGINES.md): the C++ front end parses it with
// kvcheck::traits_from_json_text and the plugin returns it from traits_json.
// Limits are the engine's own (own_engine.h); every invariance is bitwise
// because each token runs through the same sequential loops whatever the
// batch, the chunking or the other sequences.
#pragma once

namespace own {

inline constexpr const char* kTraitsJson = R"({
  "identity": {"name": "own-engine", "version": "1"},
  "operations": {"multi_sequence_step": true, "finish": true, "reset": true,
                 "cache_snapshot": true, "capacity_refusal": true, "save_restore": true,
                 "fault_switches": false},
  "limits": {"families": ["llama"], "kv_dtypes": ["f32"], "min_head_dim": 2,
             "head_dim_multiple": 2, "max_capacity": 65536, "max_rows": 256},
  "invariance": {"chunking": "bitwise", "batch": "bitwise", "reset": "bitwise",
                 "compaction": "bitwise", "gqa_twin": "bitwise", "determinism": "bitwise"},
  "arithmetic": {"accumulation": "f32", "activations": "f32", "rope_angles_in_float": false,
                 "queries_rounded_to_kv_dtype": false}
})";

}  // namespace own
