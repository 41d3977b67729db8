// Erase and shift on the CPU engine (docs/OPERATIONS.md, "Erase and shift"):
// the identities that hold bitwise, the refusals that change nothing, the
// positions the cells report, and the engine within the derived bound of
// the cache-level oracle (oracle::replay, derive_history_bounds).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "oracle/oracle.h"
#include "properties/tolerance.h"
#include "tests/engine/engine_test_util.h"

namespace kvcheck::test {
namespace {

Config model() {
  Config c = llama_tiny();
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  return c;
}

EngineOptions options(KvDtype dtype = KvDtype::kF32) {
  EngineOptions o;
  o.capacity = 32;
  o.max_rows = 2;
  o.kv_dtype = dtype;
  return o;
}

const std::vector<int32_t> kTokens = {3, 17, 5, 40, 9, 22, 31, 8};

TEST(Shift, EraseOfNothingChangesNoBit) {
  const Config c = model();
  const Weights w = init_weights(c, 5);
  std::vector<float> expected, got, logits;
  for (bool erase : {false, true}) {
    auto e = make_cpu_engine(c, w, options());
    const SequenceId s = e->start();
    feed(*e, s, kTokens, {5, 3});
    if (erase) e->erase(s, 8, 20), e->erase(s, 3, 3);
    logits = feed(*e, s, {7, 1}, {1, 1});
    (erase ? got : expected) = logits;
  }
  expect_bitwise(expected, got, "erase past the end and of an empty range");
}

TEST(Shift, EraseOfTheTailIsATruncation) {
  const Config c = model();
  const Weights w = init_weights(c, 5);
  auto a = make_cpu_engine(c, w, options());
  auto b = make_cpu_engine(c, w, options());
  const SequenceId sa = a->start(), sb = b->start();
  feed(*a, sa, kTokens, {8});
  feed(*b, sb, kTokens, {8});
  a->erase(sa, 5, 100);
  b->truncate(sb, 3);
  EXPECT_EQ(a->length(sa), 5);
  expect_bitwise(feed(*a, sa, {7, 1}, {2}), feed(*b, sb, {7, 1}, {2}), "tail erase vs truncate");
}

TEST(Shift, CellsReportTheirPositionsAndTheNextGoesAfterTheLargest) {
  const Config c = model();
  auto e = make_cpu_engine(c, init_weights(c, 5), options());
  const SequenceId s = e->start();
  feed(*e, s, kTokens, {8});
  e->erase(s, 1, 3);  // 0 3 4 5 6 7
  EXPECT_EQ(e->length(s), 6);
  feed(*e, s, {7}, {1});  // at 8
  EXPECT_EQ(e->cache(s, 0).positions, (std::vector<int32_t>{0, 3, 4, 5, 6, 7, 8}));
  e->shift(s, 3, 100, -2);  // 0 1 2 3 4 5 6
  EXPECT_EQ(e->cache(s, 1).positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(e->unheld_storage_check(), "");  // the erased tail was poisoned
}

TEST(Shift, RefusalsNameTheProblemAndChangeNothing) {
  const Config c = model();
  auto e = make_cpu_engine(c, init_weights(c, 5), options());
  const SequenceId s = e->start();
  feed(*e, s, kTokens, {8});
  e->erase(s, 2, 3);
  const std::vector<uint8_t> before = cache_bytes(*e, s);
  const auto refused = [&](auto call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "not refused: " << words;
    } catch (const EngineError& error) {
      EXPECT_EQ(error.kind(), EngineError::Kind::kBadBatch);
      EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
    }
    EXPECT_EQ(e->length(s), 7);
    EXPECT_EQ(cache_bytes(*e, s), before) << words;
  };
  refused([&] { e->shift(s, 3, 100, -2); }, "two cells hold one position");  // 3 -> 1
  refused([&] { e->shift(s, 0, 100, -1); }, "leaves [0, max_pos");
  refused([&] { e->shift(s, 0, 100, c.max_pos); }, "leaves [0, max_pos");
  refused([&] { e->erase(s, 5, 4); }, "0 <= p0 <= p1");
  refused([&] { e->shift(s, -1, 4, 1); }, "0 <= p0 <= p1");
}

TEST(Shift, PagedStorageRefusesWithAClearError) {
  const Config c = model();
  EngineOptions o = options();
  o.block_size = 4;
  auto e = make_cpu_engine(c, init_weights(c, 5), o);
  const SequenceId s = e->start();
  feed(*e, s, kTokens, {8});
  try {
    e->erase(s, 1, 2);
    ADD_FAILURE() << "paged erase accepted";
  } catch (const EngineError& error) {
    EXPECT_NE(std::string(error.what()).find("contiguous storage"), std::string::npos);
  }
  EXPECT_EQ(e->length(s), 8);
}

// The worst error/bound of an engine's logits (after kTokens fed in chunks
// of 5 and 3, then `run`) and final cache against the replay of kTokens'
// feeds then `after`.
double worst_against_replay(const Config& c, const Weights& w,
                            const std::vector<oracle::Event>& after,
                            const std::function<std::vector<float>(Engine&, SequenceId)>& run,
                            EngineOptions o) {
  std::vector<oracle::Event> events;
  for (int32_t t : kTokens) events.push_back(oracle::Event::feed(t));
  events.insert(events.end(), after.begin(), after.end());
  const oracle::CellOutput exact = oracle::replay(c, w, events);
  const HistoryBounds bounds = derive_history_bounds(c, w, events, o.kv_dtype);
  auto e = make_cpu_engine(c, w, o);
  const SequenceId s = e->start();
  std::vector<float> logits = feed(*e, s, kTokens, {5, 3});
  const std::vector<float> more = run(*e, s);
  logits.insert(logits.end(), more.begin(), more.end());
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    worst = std::max(worst, std::abs(logits[i] - exact.logits[i]) / bounds.logits[i]);
  }
  const size_t C = exact.positions.size(), KV = size_t(c.kv_width());
  for (int l = 0; l < c.n_layers; ++l) {
    const CacheSnapshot snap = e->cache(s, l);
    EXPECT_EQ(size_t(snap.length), C);
    EXPECT_EQ(snap.positions, exact.positions);
    for (size_t cell = 0; cell < std::min(C, size_t(snap.length)); ++cell) {
      for (int g = 0; g < c.n_kv_heads; ++g) {
        for (int d = 0; d < c.head_dim; ++d) {
          const size_t at = (size_t(l) * C + cell) * KV + size_t(g * c.head_dim + d);
          // q8_0: the worst-case scale bound (bounds.k), as P1 uses.
          worst =
              std::max(worst, std::abs(snap.k_at(int(cell), g, d) - exact.k[at]) / bounds.k[at]);
          worst =
              std::max(worst, std::abs(snap.v_at(int(cell), g, d) - exact.v[at]) / bounds.v[at]);
        }
      }
    }
  }
  return worst;
}

// A context shift, twice, then decodes; and divs that put cells on one
// position (docs/OPERATIONS.md, "Div"), a shift of them together, then
// decodes: every logit and the final cache within the derived bound of
// the replay, on every K/V dtype and both kernel paths; and the three
// shift faults outside it (a div re-rotates through the shift's path).
TEST(Shift, ContextShiftsAndDivsMatchTheReplayWithinTheDerivedBound) {
  const Config c = model();
  const Weights w = init_weights(c, 5);
  using oracle::Event;
  const std::vector<Event> shifts = {Event::erase(2, 4), Event::shift(4, 64, -2), Event::feed(7),
                                     Event::erase(0, 3), Event::shift(3, 64, -3), Event::feed(1)};
  const auto shift_run = [](Engine& e, SequenceId s) {
    e.erase(s, 2, 4);
    e.shift(s, 4, 64, -2);
    std::vector<float> logits = feed(e, s, {7}, {1});
    e.erase(s, 0, 3);
    e.shift(s, 3, 64, -3);
    const std::vector<float> more = feed(e, s, {1}, {1});
    logits.insert(logits.end(), more.begin(), more.end());
    return logits;
  };
  // 0..7 -> 0 1 1 1 2 2 3 3 (div [2, 64) by 2), fed at 4; then all but 0
  // shifted up by 3, 0 divided by 3 (nothing moves), fed at 7.
  const std::vector<Event> divs = {Event::div(2, 64, 2), Event::feed(7), Event::shift(1, 64, 3),
                                   Event::div(0, 1, 3), Event::feed(1)};
  const auto div_run = [](Engine& e, SequenceId s) {
    e.div(s, 2, 64, 2);
    std::vector<float> logits = feed(e, s, {7}, {1});
    e.shift(s, 1, 64, 3);
    e.div(s, 0, 1, 3);
    const std::vector<float> more = feed(e, s, {1}, {1});
    logits.insert(logits.end(), more.begin(), more.end());
    return logits;
  };
  for (const bool div : {false, true}) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
      for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
        for (int f = -1; f < 3; ++f) {
          const Fault faults[] = {Fault::kShiftKeepsK, Fault::kShiftRotatesV,
                                  Fault::kShiftWrongSign};
          EngineOptions o = options(dtype);
          o.kernels = path;
          if (f >= 0) o.faults = FaultSet(faults[f]);
          const double worst = div ? worst_against_replay(c, w, divs, div_run, o)
                                   : worst_against_replay(c, w, shifts, shift_run, o);
          const std::string what = std::string(div ? "div " : "") + kv_dtype_name(dtype) + " " +
                                   (path == KernelPath::kReference ? "scalar" : "simd") + " " +
                                   (f < 0 ? "correct" : std::string(fault_name(faults[f])));
          if (f < 0) {
            EXPECT_LE(worst, 1.0) << what;
          } else {
            EXPECT_GT(worst, 1.0) << what;
          }
          std::printf("%s: worst error/bound %.3g\n", what.c_str(), worst);
        }
      }
    }
  }
}

// A div refuses d < 1 and changes nothing; d = 1 and a range holding no
// cell change no bit; cells sharing a position are listed each.
TEST(Shift, DivRefusesDBelowOneAndOfNothingChangesNoBit) {
  const Config c = model();
  const Weights w = init_weights(c, 5);
  std::vector<float> expected, got;
  for (bool divide : {false, true}) {
    auto e = make_cpu_engine(c, w, options());
    const SequenceId s = e->start();
    feed(*e, s, kTokens, {8});
    if (divide) {
      const std::vector<uint8_t> before = cache_bytes(*e, s);
      try {
        e->div(s, 0, 64, 0);
        ADD_FAILURE() << "div by 0 accepted";
      } catch (const EngineError& error) {
        EXPECT_EQ(error.kind(), EngineError::Kind::kBadBatch);
        EXPECT_NE(std::string(error.what()).find("d >= 1"), std::string::npos) << error.what();
      }
      EXPECT_EQ(cache_bytes(*e, s), before);
      e->div(s, 0, 64, 1), e->div(s, 8, 20, 2), e->div(s, 3, 3, 2);
    }
    (divide ? got : expected) = feed(*e, s, {7, 1}, {1, 1});
  }
  expect_bitwise(expected, got, "div by 1, past the end and of an empty range");
  auto e = make_cpu_engine(c, w, options());
  const SequenceId s = e->start();
  feed(*e, s, kTokens, {8});
  e->div(s, 0, 64, 4);
  EXPECT_EQ(e->cache(s, 0).positions, (std::vector<int32_t>{0, 0, 0, 0, 1, 1, 1, 1}));
}

}  // namespace
}  // namespace kvcheck::test
