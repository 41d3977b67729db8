#include "properties/scenario.h"

#include "properties/schedule/operation.h"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace kvcheck {

namespace {

// The engine's own limit on rows (make_cpu_engine refuses more).
constexpr int kMaxRows = 4096;

// Shortest text that reads back to the same double, so a printed scenario
// names its config exactly.
std::string exact(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

}  // namespace

int next_position(const std::vector<int32_t>& cells) {
  int next = 0;
  for (int32_t p : cells) next = std::max(next, p + 1);
  return next;
}

int erase_cells(std::vector<int32_t>& cells, int p0, int p1) {
  const size_t before = cells.size();
  std::erase_if(cells, [&](int32_t p) { return p >= p0 && p < p1; });
  return static_cast<int>(before - cells.size());
}

std::string shift_cells(std::vector<int32_t>& cells, int p0, int p1, int delta, int max_pos) {
  std::vector<int32_t> moved = cells;
  std::vector<int32_t> staying;  // positions of the cells outside [p0, p1)
  for (int32_t& p : moved) {
    if (p < p0 || p >= p1) {
      staying.push_back(p);
      continue;
    }
    const long long to = (long long)p + delta;
    if (to < 0 || to >= max_pos) {
      return "position " + std::to_string(p) + " + " + std::to_string(delta) +
             " leaves [0, max_pos " + std::to_string(max_pos) + ")";
    }
    p = int32_t(to);
  }
  std::sort(staying.begin(), staying.end());
  for (size_t i = 0; i < moved.size(); ++i) {
    if (moved[i] != cells[i] && std::binary_search(staying.begin(), staying.end(), moved[i])) {
      return "two cells would hold one position";
    }
  }
  cells = std::move(moved);
  return {};
}

void div_cells(std::vector<int32_t>& cells, int p0, int p1, int d) {
  for (int32_t& p : cells) {
    if (p >= p0 && p < p1) p /= d;
  }
}

std::string cut_keeps_shared_positions(const std::vector<int32_t>& cells, int keep) {
  std::vector<int32_t> kept(cells.begin(), cells.begin() + keep);
  std::sort(kept.begin(), kept.end());
  for (size_t i = size_t(keep); i < cells.size(); ++i) {
    if (std::binary_search(kept.begin(), kept.end(), cells[i])) {
      return "it would drop a cell at position " + std::to_string(cells[i]) +
             " and keep another there";
    }
  }
  return {};
}

EngineOptions Scenario::engine_options() const {
  EngineOptions options;
  options.capacity = capacity;
  options.max_rows = max_rows;
  options.kv_dtype = kv_dtype;
  options.block_size = block_size;
  options.pool_blocks = pool_blocks;
  options.prefix_cache = prefix_cache;
  options.prompt_logits = prompt_logits;
  // A scenario that offloads gets a host tier that holds every sequence at
  // its capacity (the default pool's size, whatever the scenario's pool),
  // so it never runs out (docs/OPERATIONS.md, "Offload").
  const bool offloads = std::any_of(calls.begin(), calls.end(),
                                    [](const Call& c) { return c.kind == Call::Kind::kOffload; });
  if (offloads && block_size > 0) {
    options.host_blocks = max_rows * ((capacity + block_size - 1) / block_size);
  }
  return options;
}

int Scenario::size() const {
  int total = config.n_layers + config.n_heads + static_cast<int>(sequences.size());
  for (const Call& call : calls) {
    if (call.kind == Call::Kind::kStart) continue;  // counted through its sequence
    total += 1;
    for (const ChunkSpec& chunk : call.chunks) total += chunk.length;
  }
  return total;
}

std::string Scenario::validate() const {
  if (const std::string error = config.validate(); !error.empty()) return "config: " + error;
  std::ostringstream out;
  if (model && !(config == model->config)) {
    return "config: differs from the config.json of the --model checkpoint " + model->path;
  }
  if (capacity < 1 || capacity > config.max_pos) {
    out << "capacity: " << capacity << " is out of range [1, max_pos " << config.max_pos << "]";
    return out.str();
  }
  if (max_rows < 1 || max_rows > kMaxRows) {
    out << "max_rows: " << max_rows << " is out of range [1, " << kMaxRows << "]";
    return out.str();
  }
  if (block_size < 0 || block_size > 32) {
    out << "block_size: " << block_size << " is out of range [0 (contiguous), 32]";
    return out.str();
  }
  if (pool_blocks < 0 || pool_blocks > (1 << 20) || (pool_blocks > 0 && block_size == 0)) {
    out << "pool_blocks: " << pool_blocks
        << " is out of range [0, 2^20] (and needs block_size > 0)";
    return out.str();
  }
  if (prefix_cache && block_size == 0) return "prefix_cache: needs paged storage (block_size > 0)";
  if (prompt_logits && !prefix_cache) return "prompt_logits: needs a prefix cache (prefix_cache 1)";
  if (cache_keys.size() > sequences.size()) {
    return "cache_key: " + std::to_string(cache_keys.size()) + " keys for " +
           std::to_string(sequences.size()) + " sequences";
  }
  for (size_t s = 0; s < sequences.size(); ++s) {
    for (size_t i = 0; i < sequences[s].size(); ++i) {
      const int32_t token = sequences[s][i];
      if (token < 0 || token >= config.vocab) {
        out << "sequence " << s << ", token " << i << ": id " << token
            << " is outside the vocabulary [0, " << config.vocab << ")";
        return out.str();
      }
    }
  }

  ScheduleModel model(*this);
  for (size_t c = 0; c < calls.size(); ++c) {
    const Call& call = calls[c];
    if (static_cast<size_t>(call.kind) >= operations().size()) {
      out << "call " << c << ": unknown call kind " << static_cast<int>(call.kind);
      return out.str();
    }
    const Operation& op = operation(call.kind);
    if (const std::string error = op.precondition(model, call); !error.empty()) {
      return "call " + std::to_string(c) + ": " + error;
    }
    op.apply(model, call);
  }
  return {};
}

std::shared_ptr<const Weights> scenario_weights(const Scenario& scenario) {
  if (scenario.model) return {scenario.model, &scenario.model->weights};
  struct Entry {
    Config config;
    uint64_t seed = 0;
    std::shared_ptr<const Weights> weights;
  };
  thread_local Entry last;
  if (!last.weights || last.seed != scenario.weight_seed || !(last.config == scenario.config)) {
    last.weights.reset();  // free the old weights before making the new ones
    last.weights =
        std::make_shared<const Weights>(init_weights(scenario.config, scenario.weight_seed));
    last.config = scenario.config;
    last.seed = scenario.weight_seed;
  }
  return last.weights;
}

std::string Call::to_text() const {
  const std::string arguments = written_arguments(*this);
  return std::string(operation(kind).keyword) + (arguments.empty() ? "" : " " + arguments);
}

std::string Scenario::to_text() const {
  std::ostringstream out;
  out << "config " << family_name(config.family) << " layers=" << config.n_layers
      << " d_model=" << config.d_model << " heads=" << config.n_heads
      << " kv_heads=" << config.n_kv_heads << " head_dim=" << config.head_dim
      << " d_ff=" << config.d_ff << " vocab=" << config.vocab << " max_pos=" << config.max_pos
      << " rope_theta=" << exact(config.rope_theta) << " norm_eps=" << exact(config.norm_eps)
      << " qkv_bias=" << (config.qkv_bias ? "true" : "false");
  // Only when set, so that scenarios without a window keep their text (and
  // digest, which keys the oracle's reference cache).
  if (config.sliding_window > 0) {
    out << " sliding_window=" << config.sliding_window
        << " sliding_window_pattern=" << config.sliding_window_pattern;
  }
  out << "\n";
  if (model) out << "model " << model->path << " (" << model->hash << ")\n";
  out << "weight_seed " << weight_seed << " capacity " << capacity << " max_rows " << max_rows
      << " kv_dtype " << kv_dtype_name(kv_dtype);
  // Only when set, so that contiguous scenarios keep their text (and digest).
  if (block_size > 0) out << " block_size " << block_size << " pool_blocks " << pool_blocks;
  if (prefix_cache) out << " prefix_cache 1";
  if (prompt_logits) out << " prompt_logits 1";
  out << "\n";
  for (size_t s = 0; s < sequences.size(); ++s) {
    out << "s" << s << " (" << sequences[s].size() << " tokens";
    if (cache_key(int(s)) != 0) out << ", cache key " << cache_key(int(s));
    out << "):";
    for (int32_t token : sequences[s]) out << " " << token;
    out << "\n";
  }
  for (size_t c = 0; c < calls.size(); ++c)
    out << "call " << c << ": " << calls[c].to_text() << "\n";
  return out.str();
}

}  // namespace kvcheck
