#include "engine/faults.h"

namespace kvcheck {

namespace {

struct FaultInfo {
  std::string_view name;
  std::string_view summary;
  std::string_view needs = "";  // the operation it lives in (fault_needs)
};

constexpr std::array<FaultInfo, kFaultCount> kFaults = {{
    {"shared_layer_cache", "all layers share one cache (MoE-Infinity PR #195)"},
    {"shared_rows", "sequences share cache rows (llama.cpp #6173, #6583)"},
    {"decode_position_zero", "decode positions restart at 0 (mlx-vlm #1983)"},
    {"chunk_position_restart", "positions restart per prefill chunk (transformers #43082)"},
    {"position_lag_after_first",
     "positions lag by one after the first chunk (onnxruntime-genai PR #2354)"},
    {"position_bump_per_layer",
     "position counter advanced inside the layer loop (flash-linear-attention #766)"},
    {"tiled_kv_heads", "tiled instead of interleaved KV heads (quant.cpp #61)"},
    {"reset_keeps_kv", "reset keeps K/V (llama.cpp #27148)"},
    {"reset_keeps_position", "reset keeps the position counter (keys_values #45)"},
    {"mask_top_left", "causal mask aligned top-left (pytorch #108108, flash-attention #282)"},
    {"append_overwrites", "append that overwrites instead of extending"},
    {"compaction_table_only", "compaction moves the row table but not the data (tt-xla #5778)"},
    {"rope_reapplied", "RoPE re-applied to cached keys (llama.cpp #3825)"},
    {"kv_swapped", "K and V swapped on write"},
    {"capacity_wraps", "capacity overflow wraps (guidance PR #1047, mlx-engine #177)"},
    {"truncate_noop", "a cache trim that is a no-op (mlx-lm #1109)", "truncate"},
    {"truncate_keeps_position",
     "a trim rewinds the slots but not the position counter (mlx-lm #1109, rollback)", "truncate"},
    {"reset_clears_layer0_only",
     "reset re-poisons layer 0 only (issue 14: nothing checked re-poisoning)", "storage_check"},
    {"cow_skipped", "write into a shared block without copying (SGLang #34683, warm-hit drift)",
     "paged"},
    {"fork_shares_partial_block",
     "fork shares the partially filled last block and appends into it (vLLM #38715 class)",
     "paged"},
    {"freed_block_still_referenced", "a block freed while still referenced (vLLM #37076)", "paged"},
    {"refcount_leak", "reference counts leak, blocks never freed (TensorRT-LLM PR #12510)",
     "paged"},
    {"block_aliasing", "two blocks alias one storage block (vLLM #41657: 2 x 16 == 1 x 32)",
     "paged"},
    {"kv_scale_dropped",
     "q8_0 scales taken as 1.0 (SGLang #18818, #20705; FlashInfer #1023: scales dropped)", "q8_0"},
    {"kv_scale_per_tensor", "q8_0 scale per tensor instead of per block (granularity mismatch)",
     "q8_0"},
    {"kv_scale_shared_kv", "V quantized with K's scales (vLLM #46329: a V-scale error)", "q8_0"},
    {"prefix_hash_only", "prefix match on a 4-bit hash with no token check (openvino.genai #3722)",
     "prefix_cache"},
    {"prefix_hit_extra_block",
     "a hit of exactly one block takes one block too many and writes into it (SGLang #22819)",
     "prefix_cache"},
    {"refusal_leaves_half_table",
     "a refused allocation leaves a half-built block table (TensorRT-LLM PR #12510 invariants)",
     "paged"},
    {"window_off_by_one",
     "a full window drops its oldest key, W - 1 seen (transformers #37574: wrong update at the "
     "window size)",
     "sliding_window"},
    {"window_per_chunk",
     "the window's start taken once per chunk, every row over-attends (executorch #21857)",
     "sliding_window"},
    {"ring_index_unwrapped",
     "a chunked write past the ring's end is not wrapped (transformers PR #47708 class)",
     "sliding_window"},
    {"shift_keeps_k",
     "context shift moves positions without re-rotating K (llama.cpp #12357 class: gibberish "
     "after a shift)",
     "shift"},
    {"shift_rotates_v", "context shift rotates V as well as K (llama.cpp #12357 class)", "shift"},
    {"shift_wrong_sign", "context shift rotates K by -delta (llama.cpp #12357 class)", "shift"},
    {"truncate_late",
     "rejected drafts stay visible to the next step: a rejection handled one step late "
     "(openvino.genai #4190)",
     "truncate"},
    {"truncate_all_noop",
     "a rollback of the whole cache keeps it: crop(0) read as no limit (transformers #47433)",
     "truncate"},
    {"truncate_keeps_last",
     "a rollback of n tokens keeps the last rejected one: a negative crop off by one "
     "(transformers #47433)",
     "truncate"},
    {"abort_frees_cached",
     "an abort between prefill chunks frees the blocks it wrote but leaves them in the prefix "
     "index: later hits read freed pages (SGLang #38319)",
     "abort"},
    {"prefix_ignores_key",
     "prefix-cache blocks shared across cache keys: cache_salt or the LoRA adapter not in the "
     "block key (vLLM #53495, #44250, #30931)",
     "cache_keys"},
    {"hit_prompt_logits_stale",
     "on a prefix hit, the reused prompt rows are never computed and keep whatever the logits "
     "buffer held (vLLM #42019: prompt logprobs from uninitialized memory)",
     "prompt_logits"},
    {"offload_before_write",
     "the copy to the host tier does not wait for the last step's writes: the host block holds "
     "the slots as they were before it, and the reload brings back stale ones (vLLM #45704)",
     "offload"},
    {"offload_counts_drift",
     "a block brought back from the host tier is not returned to the host free list: the host "
     "tier's counters drift (TensorRT-LLM PR #12834)",
     "offload"},
    {"restore_keeps_tail",
     "a restore writes the saved cells but does not clear the ones the sequence held past them: "
     "they stay visible, with their positions (llama.cpp #4005: set_state_data of a shorter "
     "state left the cache's other cells in place and the logits after it were bogus)",
     "save_restore"},
}};

}  // namespace

std::string_view fault_name(Fault f) {
  return kFaults[static_cast<size_t>(f)].name;
}
std::string_view fault_summary(Fault f) {
  return kFaults[static_cast<size_t>(f)].summary;
}

std::string_view fault_needs(Fault f) {
  return kFaults[static_cast<size_t>(f)].needs;
}

std::optional<Fault> parse_fault(std::string_view name) {
  for (int i = 0; i < kFaultCount; ++i) {
    if (kFaults[static_cast<size_t>(i)].name == name) return static_cast<Fault>(i);
  }
  return std::nullopt;
}

std::string FaultSet::to_string() const {
  std::string out;
  for (int i = 0; i < kFaultCount; ++i) {
    if (!has(static_cast<Fault>(i))) continue;
    if (!out.empty()) out += ",";
    out += fault_name(static_cast<Fault>(i));
  }
  return out.empty() ? "none" : out;
}

Result<FaultSet> parse_fault_list(std::string_view text) {
  FaultSet faults;
  if (text == "none") return faults;
  const auto known = [] {
    std::string names;
    for (int i = 0; i < kFaultCount; ++i) {
      names += (i ? ", " : "") + std::string(fault_name(static_cast<Fault>(i)));
    }
    return names;
  };
  if (text.empty()) {
    return Result<FaultSet>::failure("expected none or fault names separated by commas");
  }
  for (;;) {
    const size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    const std::optional<Fault> f = parse_fault(name);
    if (!f) {
      return Result<FaultSet>::failure("unknown fault \"" + std::string(name) +
                                       "\"; expected none or one of " + known());
    }
    faults = faults.with(*f);
    if (comma == std::string_view::npos) return faults;
    text = text.substr(comma + 1);
    if (text.empty()) {
      return Result<FaultSet>::failure("expected a fault name after the last comma");
    }
  }
}

}  // namespace kvcheck
