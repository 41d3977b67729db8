// Erase and shift on the CPU engine (docs/OPERATIONS.md, "Erase and shift"):
// the identities that hold bitwise, the refusals that change nothing, the
// positions the cells report, and the engine within the derived bound of
// the cache-level oracle (oracle::replay, derive_history_bounds).
#include <gtest/gtest.h>

#include <cmath>
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

// A context shift, twice, then decodes: every logit and the final cache
// within the derived bound of the replay, on every K/V dtype and both
// kernel paths; and the three shift faults outside it.
TEST(Shift, ContextShiftsMatchTheReplayWithinTheDerivedBound) {
  const Config c = model();
  const Weights w = init_weights(c, 5);
  using oracle::Event;
  std::vector<Event> events;
  for (int32_t t : kTokens) events.push_back(Event::feed(t));
  const std::vector<Event> shifts = {Event::erase(2, 4), Event::shift(4, 64, -2), Event::feed(7),
                                     Event::erase(0, 3), Event::shift(3, 64, -3), Event::feed(1)};
  events.insert(events.end(), shifts.begin(), shifts.end());
  const oracle::CellOutput exact = oracle::replay(c, w, events);
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kQ8_0}) {
    const HistoryBounds bounds = derive_history_bounds(c, w, events, dtype);
    for (KernelPath path : {KernelPath::kReference, KernelPath::kOptimized}) {
      for (int f = -1; f < 3; ++f) {
        const Fault faults[] = {Fault::kShiftKeepsK, Fault::kShiftRotatesV, Fault::kShiftWrongSign};
        EngineOptions o = options(dtype);
        o.kernels = path;
        if (f >= 0) o.faults = FaultSet(faults[f]);
        auto e = make_cpu_engine(c, w, o);
        const SequenceId s = e->start();
        std::vector<float> logits = feed(*e, s, kTokens, {5, 3});
        e->erase(s, 2, 4);
        e->shift(s, 4, 64, -2);
        std::vector<float> more = feed(*e, s, {7}, {1});
        logits.insert(logits.end(), more.begin(), more.end());
        e->erase(s, 0, 3);
        e->shift(s, 3, 64, -3);
        more = feed(*e, s, {1}, {1});
        logits.insert(logits.end(), more.begin(), more.end());
        double worst = 0;
        for (size_t i = 0; i < logits.size(); ++i) {
          worst = std::max(worst, std::abs(logits[i] - exact.logits[i]) / bounds.logits[i]);
        }
        const size_t C = exact.positions.size(), KV = size_t(c.kv_width());
        for (int l = 0; l < c.n_layers; ++l) {
          const CacheSnapshot snap = e->cache(s, l);
          ASSERT_EQ(size_t(snap.length), C);
          EXPECT_EQ(snap.positions, exact.positions);
          for (size_t cell = 0; cell < C; ++cell) {
            for (int g = 0; g < c.n_kv_heads; ++g) {
              for (int d = 0; d < c.head_dim; ++d) {
                const size_t at = (size_t(l) * C + cell) * KV + size_t(g * c.head_dim + d);
                // q8_0: the worst-case scale bound (bounds.k), as P1 uses.
                worst = std::max(worst,
                                 std::abs(snap.k_at(int(cell), g, d) - exact.k[at]) / bounds.k[at]);
                worst = std::max(worst,
                                 std::abs(snap.v_at(int(cell), g, d) - exact.v[at]) / bounds.v[at]);
              }
            }
          }
        }
        const std::string what = std::string(kv_dtype_name(dtype)) + " " +
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

}  // namespace
}  // namespace kvcheck::test
