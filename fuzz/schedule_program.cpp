#include "fuzz/schedule_program.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <iterator>
#include <limits>

#include <fuzzer/FuzzedDataProvider.h>

#include "fuzz/fuzz_model.h"
#include "properties/schedule/operation.h"

namespace kvcheck::fuzz {
namespace {

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
  size_t size() const { return taken_order_.size(); }
  void resize(size_t size) { taken_order_.resize(size); }  // takes back what came after
  std::vector<uint8_t> bytes() const { return {taken_order_.rbegin(), taken_order_.rend()}; }

 private:
  std::vector<uint8_t> taken_order_;  // in the order the reader takes them
};

// A call's arguments, read (decode) or written (encode) by one function per
// operation (FuzzOp::code), so the two directions cannot disagree.
class CallBytes {
 public:
  virtual ~CallBytes() = default;
  virtual bool writing() const = 0;
  // Reads v from [lo, hi]; or clamps v into it and writes it.
  virtual void value(int& v, int lo, int hi) = 0;
  // v is one of `from`: reads its index, or writes it. False (nothing read
  // or written) when `from` is empty or, writing, lacks v.
  bool pick(const std::vector<int>& from, int& v) {
    int i = writing() ? index_of(from, v) : 0;
    if (from.empty() || i < 0) return false;
    value(i, 0, static_cast<int>(from.size()) - 1);
    v = from[size_t(i)];
    return true;
  }
};

class BytesIn final : public CallBytes {
 public:
  explicit BytesIn(FuzzedDataProvider& reader) : reader_(reader) {}
  bool writing() const override { return false; }
  void value(int& v, int lo, int hi) override { v = reader_.ConsumeIntegralInRange<int>(lo, hi); }

 private:
  FuzzedDataProvider& reader_;
};

class BytesOut final : public CallBytes {
 public:
  explicit BytesOut(ByteWriter& writer) : writer_(writer) {}
  bool writing() const override { return true; }
  void value(int& v, int lo, int hi) override {
    v = std::clamp(v, lo, hi);
    writer_.value(v, lo, hi);
  }

 private:
  ByteWriter& writer_;
};

// Each operation's bytes after its opcode, read or written against the
// schedule so far; false when the call cannot apply there (it decodes to
// nothing, and encode() drops it). The bytes are the fuzz format's own:
// indices among the sequences the call may name, and ranges narrowed to
// what the sequence holds, so that any bytes decode to a valid call.

// How many of the feedable sequences, then for each its index among those
// left and its chunk's length.
bool code_step(CallBytes& io, const FuzzModel& model, Call& call) {
  std::vector<int> left = model.feedable();
  if (io.writing()) {  // the chunks that can apply, in batch order, each sequence once
    std::vector<int> unused = left;
    std::erase_if(call.chunks, [&](const ChunkSpec& chunk) {
      const int i = index_of(unused, chunk.sequence);
      if (i >= 0) unused.erase(unused.begin() + i);
      return i < 0;
    });
    if (call.chunks.empty()) return false;
  }
  if (left.empty()) return false;
  int count = static_cast<int>(call.chunks.size());
  io.value(count, 1, static_cast<int>(left.size()));
  call.chunks.resize(size_t(count));
  for (ChunkSpec& chunk : call.chunks) {
    io.pick(left, chunk.sequence);
    io.value(chunk.length, 1, model.longest_chunk(chunk.sequence));
    left.erase(left.begin() + index_of(left, chunk.sequence));
  }
  return true;
}

// The next sequence; no bytes.
bool code_start(CallBytes&, const FuzzModel& model, Call& call) {
  call.sequence = model.started();
  return model.can_start();
}

bool code_finish(CallBytes& io, const FuzzModel& model, Call& call) {
  return io.pick(model.running(), call.sequence);
}

// No arguments: reset, flush (where its scope allows it).
bool code_nothing(CallBytes&, const FuzzModel&, Call&) {
  return true;
}

// The parent among the running sequences, then how many of its cells.
bool code_fork(CallBytes& io, const FuzzModel& model, Call& call) {
  if (!model.can_start() || !io.pick(model.running(), call.parent)) return false;
  call.sequence = model.started();
  io.value(call.count, 0, model.at(call.parent).held());
  return true;
}

// The sequence among those holding cells, then 1..held cells.
bool code_truncate(CallBytes& io, const FuzzModel& model, Call& call) {
  if (!io.pick(model.holding(), call.sequence)) return false;
  io.value(call.count, 1, model.at(call.sequence).held());
  return true;
}

// verify: a sequence holding cells, its drafts among them, the accepted.
bool code_verify(CallBytes& io, const FuzzModel& model, Call& call) {
  if (!io.pick(model.holding(), call.sequence)) return false;
  io.value(call.count, 1, model.at(call.sequence).held());
  io.value(call.accepted, 0, call.count);
  return true;
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

// erase and shift: the sequence among those holding cells, a nonempty
// range [p0, p1) below its next position, and a shift's distance down.
bool code_range(CallBytes& io, const FuzzModel& model, Call& call) {
  if (!io.pick(model.holding(), call.sequence)) return false;
  const SequenceModel& seq = model.at(call.sequence);
  const int next = seq.next_position();
  io.value(call.p0, 0, next - 1);
  io.value(call.p1, call.p0 + 1, next);
  if (call.kind == Call::Kind::kErase) return true;
  const int room = shift_room(seq.cells, call.p0);
  if (room < 1) return false;
  int down = -call.delta;
  io.value(down, 1, room);
  call.delta = -down;
  return true;
}

// div: the sequence among those holding cells, a nonempty range [p0, p1)
// below its next position, and a divisor 1..8 (1 changes nothing).
bool code_div(CallBytes& io, const FuzzModel& model, Call& call) {
  if (!io.pick(model.holding(), call.sequence)) return false;
  const int next = model.at(call.sequence).next_position();
  io.value(call.p0, 0, next - 1);
  io.value(call.p1, call.p0 + 1, next);
  io.value(call.divisor, 1, 8);
  return true;
}

// What the mutator drew for a call it inserts (each draw its own statement:
// the order of a call's arguments is unspecified, and g++ and clang differ).
struct ExampleDraws {
  int starts;    // sequences started: the next one's index
  int sequence;  // any sequence, or one past them
  int a, b;      // 0..kMaxTokens - 1 and 1..kMaxTokens
};

// The fuzz opcode of each operation is its index here: the byte format, so
// new operations go at the end.
struct FuzzOp {
  Call::Kind kind;
  bool (*code)(CallBytes& io, const FuzzModel& model, Call& call);
  // A call the mutator inserts, from its draws; encode() makes it valid.
  Call (*example)(const ExampleDraws& draws, Random& random);
};

constexpr std::array kFuzzOps = {
    FuzzOp{Call::Kind::kStep, code_step,
           [](const ExampleDraws& d, Random&) {
             return Call::step({{d.sequence, 1 + (d.b - 1) % kMaxChunk}});
           }},
    FuzzOp{Call::Kind::kStart, code_start,
           [](const ExampleDraws& d, Random&) { return Call::start(d.starts); }},
    FuzzOp{Call::Kind::kFinish, code_finish,
           [](const ExampleDraws& d, Random&) { return Call::finish(d.sequence); }},
    FuzzOp{Call::Kind::kReset, code_nothing,
           [](const ExampleDraws&, Random&) { return Call::reset(); }},
    FuzzOp{Call::Kind::kFork, code_fork,
           [](const ExampleDraws& d, Random&) { return Call::fork(d.starts, d.sequence, d.a); }},
    FuzzOp{Call::Kind::kTruncate, code_truncate,
           [](const ExampleDraws& d, Random&) { return Call::truncate(d.sequence, d.b); }},
    FuzzOp{Call::Kind::kFlush, code_nothing,
           [](const ExampleDraws&, Random&) { return Call::flush(); }},
    FuzzOp{Call::Kind::kErase, code_range,
           [](const ExampleDraws& d, Random&) { return Call::erase(d.sequence, d.a, d.b); }},
    FuzzOp{Call::Kind::kShift, code_range,
           [](const ExampleDraws& d, Random& random) {
             return Call::shift(d.sequence, d.a, d.b, -random.between(1, kMaxTokens));
           }},
    FuzzOp{Call::Kind::kVerify, code_verify,
           [](const ExampleDraws& d, Random&) { return Call::verify(d.sequence, d.b, d.a % d.b); }},
    FuzzOp{Call::Kind::kAbort, code_finish,
           [](const ExampleDraws& d, Random&) { return Call::abort(d.sequence); }},
    FuzzOp{Call::Kind::kOffload, code_finish,
           [](const ExampleDraws& d, Random&) { return Call::offload(d.sequence); }},
    FuzzOp{Call::Kind::kSave, code_finish,
           [](const ExampleDraws& d, Random&) { return Call::save(d.sequence); }},
    FuzzOp{Call::Kind::kRestore, code_finish,
           [](const ExampleDraws& d, Random&) { return Call::restore(d.sequence); }},
    FuzzOp{Call::Kind::kDiv, code_div,
           [](const ExampleDraws& d, Random& random) {
             return Call::div(d.sequence, d.a, d.b, random.between(2, 4));
           }},
};
constexpr int kOpLast = static_cast<int>(kFuzzOps.size()) - 1;

// The opcodes in the order the mutator draws which call to insert: the
// order it has always used, so that its edits (pinned by
// schedule_program_test's digest) stay the same. New operations go at the end.
constexpr std::array<int, kFuzzOps.size()> kInsertOrder = {0, 1, 2,  4,  5,  6,  7, 8,
                                                           3, 9, 10, 11, 12, 13, 14};

int opcode(Call::Kind kind) {
  for (size_t op = 0; op < kFuzzOps.size(); ++op) {
    if (kFuzzOps[op].kind == kind) return static_cast<int>(op);
  }
  return -1;
}

// Reads or writes `call`'s arguments; false when it cannot apply: outside
// its operation's scope (flush without a prefix cache, erase and shift
// where they do not apply), without a valid reading, or refused by its
// operation's precondition.
bool code_call(CallBytes& io, const FuzzModel& model, Call& call) {
  const Operation& op = operation(call.kind);
  if (op.scope && !op.scope(model.bounds()).empty()) return false;
  return kFuzzOps[size_t(opcode(call.kind))].code(io, model, call) && model.allows(call);
}

}  // namespace

ScheduleProgram decode(std::span<const uint8_t> bytes) {
  FuzzedDataProvider reader(bytes.data(), bytes.size());
  ScheduleProgram program;
  for (const FieldRange& f : kHeaderFields) {
    program.header.*f.field = reader.ConsumeIntegralInRange<int>(f.lo, f.hi);
  }
  FuzzModel model(program.header);
  BytesIn in(reader);
  while (reader.remaining_bytes() > 0 && program.calls.size() < size_t(kMaxCalls)) {
    Call call;
    call.kind = kFuzzOps[size_t(reader.ConsumeIntegralInRange<int>(0, kOpLast))].kind;
    if (!code_call(in, model, call)) continue;
    model.apply(call);
    program.calls.push_back(std::move(call));
  }
  return program;
}

std::vector<uint8_t> encode(const ScheduleProgram& program) {
  ByteWriter writer;
  for (const FieldRange& f : kHeaderFields) writer.value(program.header.*f.field, f.lo, f.hi);
  FuzzModel model(program.header);
  BytesOut out(writer);
  int calls = 0;
  for (const Call& original : program.calls) {
    if (calls == kMaxCalls) break;
    Call call = original;
    const size_t before = writer.size();
    writer.value(opcode(call.kind), 0, kOpLast);
    if (!code_call(out, model, call)) {
      writer.resize(before);  // a call that cannot apply is dropped
      continue;
    }
    model.apply(call);
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
  FuzzModel model(valid.header);
  for (const Call& call : valid.calls) model.apply(call);
  scenario.calls = valid.calls;
  // No engine combines a window with the operations beyond start, step,
  // finish and reset (docs/OPERATIONS.md).
  const bool operations = std::any_of(valid.calls.begin(), valid.calls.end(), [](const Call& c) {
    return c.kind != Call::Kind::kStart && c.kind != Call::Kind::kStep &&
           c.kind != Call::Kind::kFinish && c.kind != Call::Kind::kReset;
  });
  if (b.block_size == 0 && !operations && b.sliding_window > 0) {
    config.sliding_window = b.sliding_window;
    config.sliding_window_pattern = b.window_pattern;
  }
  for (int s = 0; s < model.started(); ++s) {
    std::vector<int32_t> tokens(static_cast<size_t>(model.at(s).fed));
    for (size_t t = 0; t < tokens.size(); ++t) {
      // The first shared_prefix tokens of every sequence are sequence 0's.
      const uint64_t stream =
          mix(uint64_t(b.token_seed) << 8 | (t < size_t(b.shared_prefix) ? 0 : size_t(s)));
      tokens[t] = static_cast<int32_t>(mix(stream + t) % uint64_t(config.vocab));
    }
    scenario.sequences.push_back(std::move(tokens));
  }
  scenario.capacity = std::max(1, model.longest_held + b.capacity_slack);
  scenario.block_size = b.block_size;
  scenario.prefix_cache = has_prefix_cache(b);
  scenario.pool_blocks = b.block_size > 0 ? b.pool_blocks : 0;
  // After an erase the positions run past the cells held.
  config.max_pos = std::max(scenario.capacity, model.longest_position) + b.max_pos_slack;
  scenario.max_rows = std::max(1, model.peak_running + b.spare_rows);
  return scenario;
}

namespace {

// One schedule-level edit (mutate_program); each draw from `random` is its
// own statement, so that the edit is the same under every compiler.
class Mutator {
 public:
  Mutator(ScheduleProgram& program, uint64_t random_state)
      : random_(random_state), program_(program), calls_(program.calls) {
    for (const Call& call : calls_) {
      starts_ += call.kind == Call::Kind::kStart || call.kind == Call::Kind::kFork;
    }
    steps_ = indices_of(Call::Kind::kStep);
  }

  void edit();

 private:
  int any_sequence() { return random_.below(starts_ + 1); }
  std::vector<Call>::iterator any_position() {
    return calls_.begin() + random_.below(int(calls_.size()) + 1);
  }
  std::vector<size_t> indices_of(Call::Kind kind) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < calls_.size(); ++i) {
      if (calls_[i].kind == kind) out.push_back(i);
    }
    return out;
  }
  size_t pick(const std::vector<size_t>& from) {
    return from[size_t(random_.below(int(from.size())))];
  }

  void insert_call() {
    const FuzzOp& op = kFuzzOps[size_t(kInsertOrder[size_t(random_.below(kOpLast + 1))])];
    const int sequence = any_sequence();
    const int a = random_.between(0, kMaxTokens - 1), b = random_.between(1, kMaxTokens);
    Call call = op.example({starts_, sequence, a, b}, random_);  // before the position's draw
    calls_.insert(any_position(), std::move(call));
  }

  // One chunk of n tokens becomes a chunks of a and then n - a: the same
  // tokens, fed across two steps.
  void split_chunk() {
    std::vector<std::pair<size_t, size_t>> splittable;  // (call, chunk)
    for (size_t i : steps_) {
      for (size_t c = 0; c < calls_[i].chunks.size(); ++c) {
        if (calls_[i].chunks[c].length >= 2) splittable.push_back({i, c});
      }
    }
    if (splittable.empty()) return;
    const auto [i, c] = splittable[size_t(random_.below(int(splittable.size())))];
    ChunkSpec& chunk = calls_[i].chunks[c];
    const int first = random_.between(1, chunk.length - 1);
    const ChunkSpec rest{chunk.sequence, chunk.length - first};
    chunk.length = first;
    calls_.insert(calls_.begin() + std::ptrdiff_t(i) + 1, Call::step({rest}));
  }

  // A sequence's chunk absorbs its next chunk, in a later step.
  void merge_chunks() {
    if (steps_.empty()) return;
    const size_t i = pick(steps_);
    if (calls_[i].chunks.empty()) return;
    ChunkSpec& chunk = calls_[i].chunks[size_t(random_.below(int(calls_[i].chunks.size())))];
    for (size_t j = i + 1; j < calls_.size(); ++j) {
      auto& later = calls_[j].chunks;
      const auto same = std::find_if(later.begin(), later.end(), [&](const ChunkSpec& c) {
        return c.sequence == chunk.sequence;
      });
      if (calls_[j].kind != Call::Kind::kStep || same == later.end()) continue;
      chunk.length += same->length;
      later.erase(same);
      if (later.empty()) calls_.erase(calls_.begin() + std::ptrdiff_t(j));
      return;
    }
  }

  // Where a reset or a finish falls decides what survives it; when there
  // is none to move, one is added.
  void move_reset_or_finish() {
    const bool move_reset = random_.below(2) == 0;
    const std::vector<size_t> found =
        indices_of(move_reset ? Call::Kind::kReset : Call::Kind::kFinish);
    if (found.empty()) {
      const Call added = move_reset ? Call::reset() : Call::finish(any_sequence());
      calls_.insert(any_position(), added);
      return;
    }
    const size_t from = pick(found);
    const Call moved = calls_[from];
    calls_.erase(calls_.begin() + std::ptrdiff_t(from));
    calls_.insert(any_position(), moved);
  }

  // A step's batch: a sequence added, one dropped, two swapped, or a
  // chunk resized.
  void edit_batch(int how) {
    if (steps_.empty()) return;
    auto& chunks = calls_[pick(steps_)].chunks;
    if (how == 0) {
      chunks.push_back({any_sequence(), random_.between(1, kMaxChunk)});
    } else if (how == 1) {
      if (chunks.size() >= 2) chunks.erase(chunks.begin() + random_.below(int(chunks.size())));
    } else if (how == 2) {
      if (chunks.size() >= 2) {
        const size_t first = size_t(random_.below(int(chunks.size())));
        const size_t second = size_t(random_.below(int(chunks.size())));
        std::swap(chunks[first], chunks[second]);
      }
    } else if (!chunks.empty()) {
      const size_t resized = size_t(random_.below(int(chunks.size())));
      chunks[resized].length = random_.between(1, kMaxChunk);
    }
  }

  Random random_;
  ScheduleProgram& program_;
  std::vector<Call>& calls_;
  int starts_ = 0;             // sequences the program starts
  std::vector<size_t> steps_;  // the steps' indices
};

void Mutator::edit() {
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
  const Edit edit = static_cast<Edit>(random_.below(kEditCount));
  switch (edit) {
    case kInsertCall:
      return insert_call();
    case kRemoveCall:
      if (!calls_.empty()) calls_.erase(calls_.begin() + random_.below(int(calls_.size())));
      return;
    case kSplitChunk:
      return split_chunk();
    case kMergeChunks:
      return merge_chunks();
    case kMoveReset:
    case kMoveFinish:
      return move_reset_or_finish();
    case kAddToBatch:
    case kDropFromBatch:
    case kReorderBatch:
    case kResizeChunk:
      return edit_batch(edit - kAddToBatch);
    case kRedrawHeader:
    case kEditCount: {
      const FieldRange& f = kHeaderFields[size_t(random_.below(int(kHeaderFields.size())))];
      program_.header.*f.field = random_.between(f.lo, f.hi);
      return;
    }
  }
}

}  // namespace

void mutate_program(ScheduleProgram& program, uint64_t random_state) {
  Mutator(program, random_state).edit();
}

}  // namespace kvcheck::fuzz
