// Free helpers of the table's users: the storage options an engine with the
// table refuses, and how a step with prefix hits trims its batch and spreads
// the computed logits back over it.
#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "engine/sequence_table.h"

namespace kvcheck {

std::string storage_options_error(const EngineOptions& options) {
  std::ostringstream out;
  if (options.block_size < 0 || options.block_size > 32) {
    out << "block_size: " << options.block_size << " is out of range [0 (contiguous), 32]";
  } else if (options.pool_blocks < 0 || options.pool_blocks > (1 << 20) ||
             (options.pool_blocks > 0 && options.block_size == 0)) {
    out << "pool_blocks: " << options.pool_blocks
        << " is out of range [0, 2^20] (and needs block_size > 0)";
  } else if (options.prefix_cache && options.block_size == 0) {
    out << "prefix_cache: needs paged storage (block_size > 0)";
  } else if (options.host_blocks < 0 || options.host_blocks > (1 << 20) ||
             (options.host_blocks > 0 && options.block_size == 0)) {
    out << "host_blocks: " << options.host_blocks
        << " is out of range [0, 2^20] (and needs block_size > 0)";
  }
  return out.str();
}

std::span<const BatchEntry> computed_part(std::span<const BatchEntry> batch,
                                          const std::vector<int>& reused,
                                          std::vector<BatchEntry>& trimmed) {
  if (std::all_of(reused.begin(), reused.end(), [](int k) { return k == 0; })) return batch;
  trimmed.assign(batch.begin(), batch.end());
  for (size_t i = 0; i < batch.size(); ++i) {
    trimmed[i].tokens = batch[i].tokens.subspan(size_t(reused[i]));
  }
  return trimmed;
}

void spread_reused_rows(std::span<const BatchEntry> batch, const std::vector<int>& reused,
                        int vocab, std::vector<float>& logits) {
  if (std::all_of(reused.begin(), reused.end(), [](int k) { return k == 0; })) return;
  const size_t V = size_t(vocab);
  size_t total = 0;
  for (const BatchEntry& e : batch) total += e.tokens.size();
  std::vector<float> all(total * V, std::numeric_limits<float>::quiet_NaN());  // [sum of n][V]
  size_t at = 0, from = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const size_t rows = batch[i].tokens.size() - size_t(reused[i]);
    std::copy_n(logits.begin() + std::ptrdiff_t(from * V), rows * V,
                all.begin() + std::ptrdiff_t((at + size_t(reused[i])) * V));
    at += batch[i].tokens.size();
    from += rows;
  }
  logits = std::move(all);
}

}  // namespace kvcheck
