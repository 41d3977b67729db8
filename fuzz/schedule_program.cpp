#include "fuzz/schedule_program.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <limits>

#include <fuzzer/FuzzedDataProvider.h>

namespace kvcheck::fuzz {
namespace {

enum Op : int {
  kOpStep = 0,
  kOpStart = 1,
  kOpFinish = 2,
  kOpReset = 3,
  kOpFork = 4,
  kOpTruncate = 5,
  kOpFlush = 6,  // only with a prefix cache
  kOpErase = 7,  // only llama on contiguous storage
  kOpShift = 8,  // the same; a negative delta only
  kOpLast = kOpShift
};

struct FieldRange {
  int ProgramHeader::*field;
  int lo, hi;
};

// The header's byte layout, in reading order. Decoding, encoding and
// mutation all walk this one table, so they cannot disagree on it.
constexpr std::array kHeaderFields = {
    FieldRange{&ProgramHeader::family, 0, 1},
    FieldRange{&ProgramHeader::n_layers, 1, kMaxLayers},
    FieldRange{&ProgramHeader::n_kv_heads, 1, kMaxKvHeads},
    FieldRange{&ProgramHeader::group, 1, kMaxGroup},
    FieldRange{&ProgramHeader::half_head_dim, 1, kMaxHalfHeadDim},
    FieldRange{&ProgramHeader::d_model, kMinWidth, kMaxDModel},
    FieldRange{&ProgramHeader::d_ff, kMinWidth, kMaxDff},
    FieldRange{&ProgramHeader::vocab, kMinVocab, kMaxVocab},
    FieldRange{&ProgramHeader::qkv_bias, 0, 1},
    FieldRange{&ProgramHeader::weight_seed, 0, 0xffff},
    FieldRange{&ProgramHeader::token_seed, 0, 0xffff},
    FieldRange{&ProgramHeader::capacity_slack, 0, kMaxSlack},
    FieldRange{&ProgramHeader::max_pos_slack, 0, kMaxSlack},
    FieldRange{&ProgramHeader::spare_rows, 0, kMaxSpareRows},
    FieldRange{&ProgramHeader::kv_dtype, 0, 3},
    FieldRange{&ProgramHeader::block_size, 0, kMaxBlockSize},
    FieldRange{&ProgramHeader::prefix_cache, 0, 1},
    FieldRange{&ProgramHeader::pool_blocks, 0, kMaxPoolBlocks},
    FieldRange{&ProgramHeader::shared_prefix, 0, kMaxTokens},
    FieldRange{&ProgramHeader::sliding_window, 0, kMaxTokens},
    FieldRange{&ProgramHeader::window_pattern, 0, 3},
};

// A flush applies only where the scenario has a prefix cache.
bool has_prefix_cache(const ProgramHeader& h) {
  return std::clamp(h.prefix_cache, 0, 1) == 1 && std::clamp(h.block_size, 0, kMaxBlockSize) > 0;
}

// Erase and shift apply to RoPE models on contiguous storage.
bool has_shifts(const ProgramHeader& h) {
  return std::clamp(h.family, 0, 1) == 1 && std::clamp(h.block_size, 0, kMaxBlockSize) == 0;
}

// A shift moves positions down only (max_pos stays what feeding needs),
// into the gap below p0: at most p0 minus the largest held position under
// p0, minus one (p0 when none is held there). 0: no room.
int shift_room(const std::vector<int32_t>& cells, int p0) {
  int below = -1;
  for (int32_t p : cells) {
    if (p < p0) below = std::max(below, int(p));
  }
  return p0 - below - 1;
}

// What the schedule has done so far; decides which operations can apply.
class ScheduleState {
 public:
  int sequence_count() const { return static_cast<int>(fed_.size()); }
  bool can_start() const { return sequence_count() < kMaxSequences && running_ < kMaxRunning; }
  int held(int s) const { return held_[size_t(s)]; }  // content length
  int longest_held() const { return longest_held_; }
  const std::vector<int32_t>& cells(int s) const { return cells_[size_t(s)]; }
  int next(int s) const { return next_position(cells_[size_t(s)]); }
  int longest_position() const { return longest_position_; }  // the largest next position
  // Running sequences holding a token (what a truncation can shorten).
  std::vector<int> truncatable() const {
    std::vector<int> out;
    for (int s : running()) {
      if (held(s) > 0) out.push_back(s);
    }
    return out;
  }
  int tokens_left(int s) const { return kMaxTokens - fed_[size_t(s)]; }
  bool is_running(int s) const {
    return s >= 0 && s < sequence_count() && running_flags_[size_t(s)];
  }

  // Running sequences, in index order.
  std::vector<int> running() const {
    std::vector<int> out;
    for (int s = 0; s < sequence_count(); ++s) {
      if (running_flags_[size_t(s)]) out.push_back(s);
    }
    return out;
  }
  // Running sequences that can still be fed, in index order.
  std::vector<int> feedable() const {
    std::vector<int> out;
    for (int s : running()) {
      if (tokens_left(s) > 0) out.push_back(s);
    }
    return out;
  }

  void apply(const Call& call) {
    switch (call.kind) {
      case Call::Kind::kStart:
      case Call::Kind::kFork:
        fed_.push_back(0);
        held_.push_back(call.kind == Call::Kind::kFork ? call.count : 0);
        cells_.emplace_back();
        if (call.kind == Call::Kind::kFork) {
          const std::vector<int32_t>& parent = cells_[size_t(call.parent)];
          cells_.back().assign(parent.begin(), parent.begin() + call.count);
        }
        running_flags_.push_back(true);
        ++running_;
        break;
      case Call::Kind::kTruncate:
        held_[size_t(call.sequence)] -= call.count;
        cells_[size_t(call.sequence)].resize(size_t(held_[size_t(call.sequence)]));
        break;
      case Call::Kind::kErase:
        held_[size_t(call.sequence)] -=
            erase_cells(cells_[size_t(call.sequence)], call.p0, call.p1);
        break;
      case Call::Kind::kShift:
        shift_cells(cells_[size_t(call.sequence)], call.p0, call.p1, call.delta,
                    std::numeric_limits<int>::max());
        break;
      case Call::Kind::kStep:
        for (const ChunkSpec& chunk : call.chunks) {
          std::vector<int32_t>& cells = cells_[size_t(chunk.sequence)];
          const int next = next_position(cells);
          for (int i = 0; i < chunk.length; ++i) cells.push_back(next + i);
          longest_position_ = std::max(longest_position_, next + chunk.length);
          fed_[size_t(chunk.sequence)] += chunk.length;
          held_[size_t(chunk.sequence)] += chunk.length;
          longest_held_ = std::max(longest_held_, held_[size_t(chunk.sequence)]);
        }
        break;
      case Call::Kind::kFinish:
        running_flags_[size_t(call.sequence)] = false;
        --running_;
        break;
      case Call::Kind::kReset:
        std::fill(running_flags_.begin(), running_flags_.end(), false);
        running_ = 0;
        break;
      case Call::Kind::kFlush:
        break;
    }
  }

 private:
  std::vector<int> fed_;                     // [sequence] stream tokens fed
  std::vector<int> held_;                    // [sequence] content length
  std::vector<std::vector<int32_t>> cells_;  // [sequence][cell] position
  std::vector<bool> running_flags_;          // [sequence]
  int running_ = 0;
  int longest_held_ = 0;
  int longest_position_ = 0;
};

int longest_chunk(int tokens_left) {
  return std::min(kMaxChunk, tokens_left);
}

int index_of(const std::vector<int>& values, int value) {
  const auto it = std::find(values.begin(), values.end(), value);
  return it == values.end() ? -1 : static_cast<int>(it - values.begin());
}

// Writes values so that FuzzedDataProvider::ConsumeIntegralInRange reads them
// back: it takes as many bytes as the range needs from the end of the data,
// the first byte taken being the most significant, and reduces the result
// modulo the range size (a no-op for values in range).
class ByteWriter {
 public:
  void value(int v, int lo, int hi) {
    const uint64_t range = uint64_t(int64_t(hi) - int64_t(lo));
    const uint64_t offset = uint64_t(int64_t(std::clamp(v, lo, hi)) - int64_t(lo));
    int bytes = 0;
    while (bytes < int(sizeof(int)) && (range >> (8 * bytes)) > 0) ++bytes;
    for (int i = bytes - 1; i >= 0; --i) taken_order_.push_back(uint8_t(offset >> (8 * i)));
  }
  std::vector<uint8_t> bytes() const { return {taken_order_.rbegin(), taken_order_.rend()}; }

 private:
  std::vector<uint8_t> taken_order_;  // in the order the reader takes them
};

// splitmix64, the portable mixer tokens and mutations draw from.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Random {
 public:
  explicit Random(uint64_t state) : state_(state) {}
  uint64_t next() { return mix(state_++); }
  int below(int n) { return n <= 0 ? 0 : static_cast<int>(next() % uint64_t(n)); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }

 private:
  uint64_t state_;
};

}  // namespace

ScheduleProgram decode(std::span<const uint8_t> bytes) {
  FuzzedDataProvider reader(bytes.data(), bytes.size());
  const auto read = [&](int lo, int hi) { return reader.ConsumeIntegralInRange<int>(lo, hi); };
  ScheduleProgram program;
  for (const FieldRange& f : kHeaderFields) program.header.*f.field = read(f.lo, f.hi);

  ScheduleState state;
  while (reader.remaining_bytes() > 0 && program.calls.size() < size_t(kMaxCalls)) {
    const int op = read(0, kOpLast);
    Call call;
    if (op == kOpStep) {
      std::vector<int> candidates = state.feedable();
      if (candidates.empty()) continue;
      const int count = read(1, static_cast<int>(candidates.size()));
      std::vector<ChunkSpec> chunks;
      for (int i = 0; i < count; ++i) {
        const int pick = read(0, static_cast<int>(candidates.size()) - 1);
        const int s = candidates[size_t(pick)];
        candidates.erase(candidates.begin() + pick);
        chunks.push_back({s, read(1, longest_chunk(state.tokens_left(s)))});
      }
      call = Call::step(std::move(chunks));
    } else if (op == kOpStart) {
      if (!state.can_start()) continue;
      call = Call::start(state.sequence_count());
    } else if (op == kOpFinish) {
      const std::vector<int> running = state.running();
      if (running.empty()) continue;
      call = Call::finish(running[size_t(read(0, static_cast<int>(running.size()) - 1))]);
    } else if (op == kOpFork) {
      const std::vector<int> running = state.running();
      if (running.empty() || !state.can_start()) continue;
      const int parent = running[size_t(read(0, static_cast<int>(running.size()) - 1))];
      call = Call::fork(state.sequence_count(), parent, read(0, state.held(parent)));
    } else if (op == kOpTruncate) {
      const std::vector<int> candidates = state.truncatable();
      if (candidates.empty()) continue;
      const int s = candidates[size_t(read(0, static_cast<int>(candidates.size()) - 1))];
      call = Call::truncate(s, read(1, state.held(s)));
    } else if (op == kOpFlush) {
      if (!has_prefix_cache(program.header)) continue;
      call = Call::flush();
    } else if (op == kOpErase || op == kOpShift) {
      // A range of held positions; a shift moves it down by 1..p0.
      const std::vector<int> candidates = state.truncatable();
      if (!has_shifts(program.header) || candidates.empty()) continue;
      const int s = candidates[size_t(read(0, static_cast<int>(candidates.size()) - 1))];
      const int next = state.next(s);
      const int p0 = read(0, next - 1);
      const int p1 = read(p0 + 1, next);
      if (op == kOpErase) {
        call = Call::erase(s, p0, p1);
      } else {
        const int room = shift_room(state.cells(s), p0);
        if (room < 1) continue;
        call = Call::shift(s, p0, p1, -read(1, room));
      }
    } else {
      call = Call::reset();
    }
    state.apply(call);
    program.calls.push_back(std::move(call));
  }
  return program;
}

std::vector<uint8_t> encode(const ScheduleProgram& program) {
  ByteWriter writer;
  for (const FieldRange& f : kHeaderFields) writer.value(program.header.*f.field, f.lo, f.hi);

  ScheduleState state;
  int calls = 0;
  for (const Call& original : program.calls) {
    if (calls == kMaxCalls) break;
    Call call = original;
    switch (call.kind) {
      case Call::Kind::kStep: {
        std::vector<int> candidates = state.feedable();
        // Keep the chunks that can apply, in batch order, each sequence once.
        std::vector<ChunkSpec> kept;
        std::vector<int> picks;  // index among the candidates left at each chunk
        for (const ChunkSpec& chunk : call.chunks) {
          const int pick = index_of(candidates, chunk.sequence);
          if (pick < 0) continue;
          kept.push_back(
              {chunk.sequence,
               std::clamp(chunk.length, 1, longest_chunk(state.tokens_left(chunk.sequence)))});
          picks.push_back(pick);
          candidates.erase(candidates.begin() + pick);
        }
        if (kept.empty()) continue;
        const int feedable = static_cast<int>(state.feedable().size());
        writer.value(kOpStep, 0, kOpLast);
        writer.value(static_cast<int>(kept.size()), 1, feedable);
        for (size_t i = 0; i < kept.size(); ++i) {
          writer.value(picks[i], 0, feedable - 1 - static_cast<int>(i));
          writer.value(kept[i].length, 1, longest_chunk(state.tokens_left(kept[i].sequence)));
        }
        call.chunks = std::move(kept);
        break;
      }
      case Call::Kind::kStart:
        if (!state.can_start()) continue;
        writer.value(kOpStart, 0, kOpLast);
        call.sequence = state.sequence_count();
        break;
      case Call::Kind::kFinish: {
        const std::vector<int> running = state.running();
        const int pick = index_of(running, call.sequence);
        if (pick < 0) continue;
        writer.value(kOpFinish, 0, kOpLast);
        writer.value(pick, 0, static_cast<int>(running.size()) - 1);
        break;
      }
      case Call::Kind::kReset:
        writer.value(kOpReset, 0, kOpLast);
        break;
      case Call::Kind::kFlush:
        if (!has_prefix_cache(program.header)) continue;
        writer.value(kOpFlush, 0, kOpLast);
        break;
      case Call::Kind::kFork: {
        const std::vector<int> running = state.running();
        const int pick = index_of(running, call.parent);
        if (pick < 0 || !state.can_start()) continue;
        writer.value(kOpFork, 0, kOpLast);
        writer.value(pick, 0, static_cast<int>(running.size()) - 1);
        call.sequence = state.sequence_count();
        call.count = std::clamp(call.count, 0, state.held(call.parent));
        writer.value(call.count, 0, state.held(call.parent));
        break;
      }
      case Call::Kind::kTruncate: {
        const std::vector<int> candidates = state.truncatable();
        const int pick = index_of(candidates, call.sequence);
        if (pick < 0) continue;
        writer.value(kOpTruncate, 0, kOpLast);
        writer.value(pick, 0, static_cast<int>(candidates.size()) - 1);
        call.count = std::clamp(call.count, 1, state.held(call.sequence));
        writer.value(call.count, 1, state.held(call.sequence));
        break;
      }
      case Call::Kind::kErase:
      case Call::Kind::kShift: {
        const std::vector<int> candidates = state.truncatable();
        const int pick = index_of(candidates, call.sequence);
        if (!has_shifts(program.header) || pick < 0) continue;
        const int next = state.next(call.sequence);
        call.p0 = std::clamp(call.p0, 0, next - 1);
        call.p1 = std::clamp(call.p1, call.p0 + 1, next);
        const bool erase = call.kind == Call::Kind::kErase;
        const int room = erase ? 0 : shift_room(state.cells(call.sequence), call.p0);
        if (!erase) {
          if (room < 1) continue;
          call.delta = -std::clamp(-call.delta, 1, room);
        }
        writer.value(erase ? kOpErase : kOpShift, 0, kOpLast);
        writer.value(pick, 0, static_cast<int>(candidates.size()) - 1);
        writer.value(call.p0, 0, next - 1);
        writer.value(call.p1, call.p0 + 1, next);
        if (!erase) writer.value(-call.delta, 1, room);
        break;
      }
    }
    state.apply(call);
    ++calls;
  }
  return writer.bytes();
}

Scenario to_scenario(const ScheduleProgram& program) {
  const ProgramHeader& h = program.header;
  const auto clamp_field = [&](const FieldRange& f) { return std::clamp(h.*f.field, f.lo, f.hi); };
  ProgramHeader b;  // the header within its bounds
  for (const FieldRange& f : kHeaderFields) b.*f.field = clamp_field(f);

  Scenario scenario;
  Config& config = scenario.config;
  config.family = b.family == 1 ? Family::kLlama : Family::kGpt2;
  config.n_layers = b.n_layers;
  config.n_kv_heads = b.n_kv_heads;
  config.n_heads = b.n_kv_heads * std::min(b.group, std::max(1, kMaxHeads / b.n_kv_heads));
  config.head_dim = 2 * b.half_head_dim;
  config.d_model = b.d_model;
  config.d_ff = b.d_ff;
  config.vocab = b.vocab;
  config.qkv_bias = config.family == Family::kGpt2 && b.qkv_bias == 1;
  scenario.weight_seed = uint64_t(b.weight_seed);
  scenario.kv_dtype = b.kv_dtype == 1   ? KvDtype::kBF16
                      : b.kv_dtype == 2 ? KvDtype::kF16
                      : b.kv_dtype == 3 ? KvDtype::kQ8_0
                                        : KvDtype::kF32;

  // The program came from decode() or was made valid by encode(); rereading
  // it through the bytes makes sure either way.
  const ScheduleProgram valid = decode(encode(program));
  ScheduleState state;
  int running = 0, peak_running = 0;
  std::vector<int> fed;  // [sequence] stream tokens
  for (const Call& call : valid.calls) {
    state.apply(call);
    switch (call.kind) {
      case Call::Kind::kStart:
      case Call::Kind::kFork:
        fed.push_back(0);
        peak_running = std::max(peak_running, ++running);
        break;
      case Call::Kind::kStep:
        for (const ChunkSpec& chunk : call.chunks) fed[size_t(chunk.sequence)] += chunk.length;
        break;
      case Call::Kind::kFinish:
        --running;
        break;
      case Call::Kind::kReset:
        running = 0;
        break;
      case Call::Kind::kTruncate:
      case Call::Kind::kFlush:
      case Call::Kind::kErase:
      case Call::Kind::kShift:
        break;
    }
  }
  scenario.calls = valid.calls;
  bool operations = false;  // a fork, truncation, flush, erase or shift: no window then
  for (const Call& call : valid.calls) {
    operations |= call.kind == Call::Kind::kFork || call.kind == Call::Kind::kTruncate ||
                  call.kind == Call::Kind::kFlush || call.kind == Call::Kind::kErase ||
                  call.kind == Call::Kind::kShift;
  }
  if (b.block_size == 0 && !operations && b.sliding_window > 0) {
    config.sliding_window = b.sliding_window;
    config.sliding_window_pattern = b.window_pattern;
  }
  for (size_t s = 0; s < fed.size(); ++s) {
    std::vector<int32_t> tokens(static_cast<size_t>(fed[s]));
    for (size_t t = 0; t < tokens.size(); ++t) {
      // The first shared_prefix tokens of every sequence are sequence 0's.
      const uint64_t stream =
          mix(uint64_t(b.token_seed) << 8 | (t < size_t(b.shared_prefix) ? 0 : s));
      tokens[t] = static_cast<int32_t>(mix(stream + t) % uint64_t(config.vocab));
    }
    scenario.sequences.push_back(std::move(tokens));
  }
  scenario.capacity = std::max(1, state.longest_held() + b.capacity_slack);
  scenario.block_size = b.block_size;
  scenario.prefix_cache = has_prefix_cache(b);
  scenario.pool_blocks = b.block_size > 0 ? b.pool_blocks : 0;
  // After an erase the positions run past the cells held.
  config.max_pos = std::max(scenario.capacity, state.longest_position()) + b.max_pos_slack;
  scenario.max_rows = std::max(1, peak_running + b.spare_rows);
  return scenario;
}

void mutate_program(ScheduleProgram& program, uint64_t random_state) {
  Random random(random_state);
  std::vector<Call>& calls = program.calls;
  int starts = 0;
  for (const Call& call : calls) {
    starts += call.kind == Call::Kind::kStart || call.kind == Call::Kind::kFork;
  }
  const auto any_sequence = [&] { return random.below(starts + 1); };
  const auto any_position = [&] { return calls.begin() + random.below(int(calls.size()) + 1); };
  const auto indices_of = [&](Call::Kind kind) {
    std::vector<size_t> out;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].kind == kind) out.push_back(i);
    }
    return out;
  };
  const auto pick = [&](const std::vector<size_t>& from) {
    return from[size_t(random.below(int(from.size())))];
  };
  const std::vector<size_t> steps = indices_of(Call::Kind::kStep);

  enum Edit {
    kInsertCall,
    kRemoveCall,
    kSplitChunk,
    kMergeChunks,
    kMoveReset,
    kMoveFinish,
    kAddToBatch,
    kDropFromBatch,
    kReorderBatch,
    kResizeChunk,
    kRedrawHeader,
    kEditCount
  };
  switch (static_cast<Edit>(random.below(kEditCount))) {
    case kInsertCall: {
      // Each draw is its own statement: the order of a call's arguments is
      // unspecified (g++ and clang differ), and the edit must not be.
      Call call;
      const int kind = random.below(9);
      const int sequence = any_sequence();
      const int a = random.between(0, kMaxTokens - 1), b = random.between(1, kMaxTokens);
      switch (kind) {
        case 0:
          call = Call::step({{sequence, 1 + (b - 1) % kMaxChunk}});
          break;
        case 1:
          call = Call::start(starts);
          break;
        case 2:
          call = Call::finish(sequence);
          break;
        case 3:
          call = Call::fork(starts, sequence, a);
          break;
        case 4:
          call = Call::truncate(sequence, b);
          break;
        case 5:
          call = Call::flush();
          break;
        case 6:
          call = Call::erase(sequence, a, b);
          break;
        case 7:
          call = Call::shift(sequence, a, b, -random.between(1, kMaxTokens));
          break;
        default:
          call = Call::reset();
          break;
      }
      calls.insert(any_position(), std::move(call));
      return;
    }
    case kRemoveCall:
      if (!calls.empty()) calls.erase(calls.begin() + random.below(int(calls.size())));
      return;
    case kSplitChunk: {
      // One chunk of n tokens becomes a chunks of a and then n - a: the same
      // tokens, fed across two steps.
      std::vector<std::pair<size_t, size_t>> splittable;  // (call, chunk)
      for (size_t i : steps) {
        for (size_t c = 0; c < calls[i].chunks.size(); ++c) {
          if (calls[i].chunks[c].length >= 2) splittable.push_back({i, c});
        }
      }
      if (splittable.empty()) return;
      const auto [i, c] = splittable[size_t(random.below(int(splittable.size())))];
      ChunkSpec& chunk = calls[i].chunks[c];
      const int first = random.between(1, chunk.length - 1);
      const ChunkSpec rest{chunk.sequence, chunk.length - first};
      chunk.length = first;
      calls.insert(calls.begin() + std::ptrdiff_t(i) + 1, Call::step({rest}));
      return;
    }
    case kMergeChunks: {
      // A sequence's chunk absorbs its next chunk, in a later step.
      if (steps.empty()) return;
      const size_t i = pick(steps);
      if (calls[i].chunks.empty()) return;
      ChunkSpec& chunk = calls[i].chunks[size_t(random.below(int(calls[i].chunks.size())))];
      for (size_t j = i + 1; j < calls.size(); ++j) {
        auto& later = calls[j].chunks;
        const auto same = std::find_if(later.begin(), later.end(), [&](const ChunkSpec& c) {
          return c.sequence == chunk.sequence;
        });
        if (calls[j].kind != Call::Kind::kStep || same == later.end()) continue;
        chunk.length += same->length;
        later.erase(same);
        if (later.empty()) calls.erase(calls.begin() + std::ptrdiff_t(j));
        return;
      }
      return;
    }
    case kMoveReset:
    case kMoveFinish: {
      // Where a reset or a finish falls decides what survives it; when there
      // is none to move, one is added.
      const bool move_reset = random.below(2) == 0;
      const std::vector<size_t> found =
          indices_of(move_reset ? Call::Kind::kReset : Call::Kind::kFinish);
      if (found.empty()) {
        const Call added = move_reset ? Call::reset() : Call::finish(any_sequence());
        calls.insert(any_position(), added);
        return;
      }
      const size_t from = pick(found);
      const Call moved = calls[from];
      calls.erase(calls.begin() + std::ptrdiff_t(from));
      calls.insert(any_position(), moved);
      return;
    }
    case kAddToBatch:
      if (steps.empty()) return;
      calls[pick(steps)].chunks.push_back({any_sequence(), random.between(1, kMaxChunk)});
      return;
    case kDropFromBatch: {
      if (steps.empty()) return;
      auto& chunks = calls[pick(steps)].chunks;
      if (chunks.size() >= 2) chunks.erase(chunks.begin() + random.below(int(chunks.size())));
      return;
    }
    case kReorderBatch: {
      if (steps.empty()) return;
      auto& chunks = calls[pick(steps)].chunks;
      if (chunks.size() >= 2) {
        const size_t first = size_t(random.below(int(chunks.size())));
        const size_t second = size_t(random.below(int(chunks.size())));
        std::swap(chunks[first], chunks[second]);
      }
      return;
    }
    case kResizeChunk: {
      if (steps.empty()) return;
      auto& chunks = calls[pick(steps)].chunks;
      if (!chunks.empty()) {
        const size_t resized = size_t(random.below(int(chunks.size())));
        chunks[resized].length = random.between(1, kMaxChunk);
      }
      return;
    }
    case kRedrawHeader:
    case kEditCount: {
      const FieldRange& f = kHeaderFields[size_t(random.below(int(kHeaderFields.size())))];
      program.header.*f.field = random.between(f.lo, f.hi);
      return;
    }
  }
}

}  // namespace kvcheck::fuzz
