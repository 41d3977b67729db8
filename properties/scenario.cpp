#include "properties/scenario.h"

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
  for (int32_t& p : moved) {
    if (p < p0 || p >= p1) continue;
    const long long to = (long long)p + delta;
    if (to < 0 || to >= max_pos) {
      return "position " + std::to_string(p) + " + " + std::to_string(delta) +
             " leaves [0, max_pos " + std::to_string(max_pos) + ")";
    }
    p = int32_t(to);
  }
  std::vector<int32_t> sorted = moved;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return "two cells would hold one position";
  }
  cells = std::move(moved);
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

  enum class State : uint8_t { kNotStarted, kRunning, kDropped };
  const int n_sequences = static_cast<int>(sequences.size());
  std::vector<State> state(sequences.size(), State::kNotStarted);  // [sequence]
  std::vector<int> fed(sequences.size(), 0);                       // [sequence] stream
  std::vector<int> held(sequences.size(), 0);                      // [sequence] content
  std::vector<std::vector<int32_t>> cells(sequences.size());       // [sequence][cell] position
  int running = 0;
  const auto in_range = [&](int s) { return s >= 0 && s < n_sequences; };
  for (size_t c = 0; c < calls.size(); ++c) {
    const Call& call = calls[c];
    out << "call " << c << ": ";
    switch (call.kind) {
      case Call::Kind::kStart:
        if (!in_range(call.sequence)) {
          out << "start of sequence " << call.sequence << ", which does not exist (there are "
              << n_sequences << ")";
          return out.str();
        }
        if (state[size_t(call.sequence)] != State::kNotStarted) {
          out << "start of sequence " << call.sequence << ", which was already started";
          return out.str();
        }
        if (running == max_rows) {
          out << "start of sequence " << call.sequence << " exceeds max_rows " << max_rows << " ("
              << running << " sequences are running)";
          return out.str();
        }
        state[size_t(call.sequence)] = State::kRunning;
        ++running;
        break;
      case Call::Kind::kStep: {
        if (call.chunks.empty()) {
          out << "step feeds no sequence";
          return out.str();
        }
        for (size_t i = 0; i < call.chunks.size(); ++i) {
          const ChunkSpec& chunk = call.chunks[i];
          const int s = chunk.sequence;
          if (!in_range(s)) {
            out << "step feeds sequence " << s << ", which does not exist (there are "
                << n_sequences << ")";
            return out.str();
          }
          if (state[size_t(s)] != State::kRunning) {
            out << "step feeds sequence " << s << " which is not running";
            return out.str();
          }
          for (size_t j = 0; j < i; ++j) {
            if (call.chunks[j].sequence == s) {
              out << "step feeds sequence " << s << " twice";
              return out.str();
            }
          }
          if (chunk.length < 1) {
            out << "step feeds sequence " << s << " a chunk of length " << chunk.length;
            return out.str();
          }
          const int end = fed[size_t(s)] + chunk.length;
          if (end > static_cast<int>(sequences[size_t(s)].size())) {
            out << "step feeds sequence " << s << " tokens " << fed[size_t(s)] << ".." << end - 1
                << " but it has only " << sequences[size_t(s)].size();
            return out.str();
          }
          if (held[size_t(s)] + chunk.length > capacity) {
            out << "step feeds sequence " << s << " up to position "
                << held[size_t(s)] + chunk.length - 1 << ", past the capacity of " << capacity;
            return out.str();
          }
          const int next = next_position(cells[size_t(s)]);
          if (next + chunk.length > config.max_pos) {
            out << "step feeds sequence " << s << " up to position " << next + chunk.length - 1
                << ", past max_pos " << config.max_pos;
            return out.str();
          }
          fed[size_t(s)] = end;
          held[size_t(s)] += chunk.length;
          for (int i = 0; i < chunk.length; ++i) cells[size_t(s)].push_back(next + i);
        }
        break;
      }
      case Call::Kind::kFinish:
        if (!in_range(call.sequence) || state[size_t(call.sequence)] != State::kRunning) {
          out << "finish of sequence " << call.sequence << " which is not running";
          return out.str();
        }
        state[size_t(call.sequence)] = State::kDropped;
        --running;
        break;
      case Call::Kind::kReset:
        for (State& s : state) {
          if (s == State::kRunning) s = State::kDropped;
        }
        running = 0;
        break;
      case Call::Kind::kFork:
        if (!in_range(call.sequence) || state[size_t(call.sequence)] != State::kNotStarted) {
          out << "fork into sequence " << call.sequence
              << ", which does not exist or was already started";
          return out.str();
        }
        if (!in_range(call.parent) || state[size_t(call.parent)] != State::kRunning) {
          out << "fork from sequence " << call.parent << " which is not running";
          return out.str();
        }
        if (call.count < 0 || call.count > held[size_t(call.parent)]) {
          out << "fork of " << call.count << " tokens from sequence " << call.parent
              << ", which holds " << held[size_t(call.parent)];
          return out.str();
        }
        if (running == max_rows) {
          out << "fork into sequence " << call.sequence << " exceeds max_rows " << max_rows;
          return out.str();
        }
        state[size_t(call.sequence)] = State::kRunning;
        held[size_t(call.sequence)] = call.count;
        cells[size_t(call.sequence)].assign(cells[size_t(call.parent)].begin(),
                                            cells[size_t(call.parent)].begin() + call.count);
        ++running;
        break;
      case Call::Kind::kTruncate:
        if (!in_range(call.sequence) || state[size_t(call.sequence)] != State::kRunning) {
          out << "truncate of sequence " << call.sequence << " which is not running";
          return out.str();
        }
        if (call.count < 0 || call.count > held[size_t(call.sequence)]) {
          out << "truncate of " << call.count << " tokens from sequence " << call.sequence
              << ", which holds " << held[size_t(call.sequence)];
          return out.str();
        }
        held[size_t(call.sequence)] -= call.count;
        cells[size_t(call.sequence)].resize(size_t(held[size_t(call.sequence)]));
        break;
      case Call::Kind::kErase:
      case Call::Kind::kShift: {
        const char* what = call.kind == Call::Kind::kErase ? "erase" : "shift";
        if (!in_range(call.sequence) || state[size_t(call.sequence)] != State::kRunning) {
          out << what << " of sequence " << call.sequence << " which is not running";
          return out.str();
        }
        if (config.family != Family::kLlama) {
          out << what << ": needs a RoPE model (llama family); gpt2's learned positions are "
              << "not applicable";
          return out.str();
        }
        if (block_size != 0) {
          out << what << ": needs contiguous storage (block_size 0)";
          return out.str();
        }
        if (config.sliding_window > 0) {
          // No engine keeps a ring and moves its cells yet.
          out << what << ": not with a sliding window (sliding_window " << config.sliding_window
              << ")";
          return out.str();
        }
        if (call.p0 < 0 || call.p1 < call.p0) {
          out << what << " of [" << call.p0 << ", " << call.p1 << "): needs 0 <= p0 <= p1";
          return out.str();
        }
        std::vector<int32_t>& c = cells[size_t(call.sequence)];
        if (call.kind == Call::Kind::kErase) {
          held[size_t(call.sequence)] -= erase_cells(c, call.p0, call.p1);
        } else if (const std::string error =
                       shift_cells(c, call.p0, call.p1, call.delta, config.max_pos);
                   !error.empty()) {
          out << "shift of s" << call.sequence << " [" << call.p0 << ", " << call.p1 << ") by "
              << call.delta << ": " << error;
          return out.str();
        }
        break;
      }
      case Call::Kind::kFlush:
        if (!prefix_cache) {
          out << "flush of the prefix cache, which the scenario does not have (prefix_cache 0)";
          return out.str();
        }
        break;
      default:
        out << "unknown call kind " << static_cast<int>(call.kind);
        return out.str();
    }
    out.str("");
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
  std::ostringstream out;
  switch (kind) {
    case Call::Kind::kStart:
      out << "start s" << sequence;
      break;
    case Call::Kind::kStep:
      out << "step";
      for (const ChunkSpec& chunk : chunks) {
        out << " s" << chunk.sequence << ":" << chunk.length;
      }
      break;
    case Call::Kind::kFinish:
      out << "finish s" << sequence;
      break;
    case Call::Kind::kReset:
      out << "reset";
      break;
    case Call::Kind::kFork:
      out << "fork s" << sequence << " s" << parent << " " << count;
      break;
    case Call::Kind::kTruncate:
      out << "truncate s" << sequence << " " << count;
      break;
    case Call::Kind::kFlush:
      out << "flush";
      break;
    case Call::Kind::kErase:
      out << "erase s" << sequence << " " << p0 << " " << p1;
      break;
    case Call::Kind::kShift:
      out << "shift s" << sequence << " " << p0 << " " << p1 << " " << delta;
      break;
  }
  return out.str();
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
  out << "\n";
  for (size_t s = 0; s < sequences.size(); ++s) {
    out << "s" << s << " (" << sequences[s].size() << " tokens):";
    for (int32_t token : sequences[s]) out << " " << token;
    out << "\n";
  }
  for (size_t c = 0; c < calls.size(); ++c)
    out << "call " << c << ": " << calls[c].to_text() << "\n";
  return out.str();
}

}  // namespace kvcheck
