// oracle::replay, the cache-level definition of erase and shift
// (docs/ORACLE.md, "Context shift").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/status.h"
#include "oracle/ops.h"
#include "oracle/oracle.h"

namespace kvcheck::oracle {
namespace {

Config model() {
  Config c = llama_tiny();
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  return c;
}

std::vector<Event> feeds(const std::vector<int32_t>& tokens) {
  std::vector<Event> out;
  for (int32_t t : tokens) out.push_back(Event::feed(t));
  return out;
}

std::vector<Event> cat(std::vector<Event> a, const std::vector<Event>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

double largest_difference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

// The last row ([V]) of a replay's logits.
std::vector<double> last_row(const CellOutput& o, int vocab) {
  return {o.logits.end() - vocab, o.logits.end()};
}

const std::vector<int32_t> kTokens = {3, 17, 5, 40, 9, 22};

TEST(Replay, FeedsAloneAreTheForwardPass) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const CellOutput r = replay(c, w, feeds(kTokens));
  const Output f = forward(c, w, kTokens);
  // Bit for bit: both compose the same ops (attend included) in the same
  // order for each position, so any difference is a divergence of the two.
  EXPECT_EQ(r.logits, f.logits);
  EXPECT_EQ(r.k, f.k);
  EXPECT_EQ(r.v, f.v);
  EXPECT_EQ(r.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Replay, EraseOrDivOfNothingIsTheIdentity) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const CellOutput plain = replay(c, w, cat(feeds(kTokens), feeds({7})));
  // A range past the last position, an empty range, and a div by 1.
  for (const Event& e : {Event::erase(6, 40), Event::erase(2, 2), Event::div(6, 40, 3),
                         Event::div(2, 2, 2), Event::div(0, 64, 1)}) {
    const CellOutput erased = replay(c, w, cat(cat(feeds(kTokens), {e}), feeds({7})));
    EXPECT_EQ(erased.logits, plain.logits);
    EXPECT_EQ(erased.k, plain.k);
    EXPECT_EQ(erased.positions, plain.positions);
  }
}

TEST(Replay, ShiftThereAndBackReturnsTheKeys) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const CellOutput plain = replay(c, w, feeds(kTokens));
  const CellOutput there = replay(c, w, cat(feeds(kTokens), {Event::shift(2, 64, 5)}));
  const CellOutput back =
      replay(c, w, cat(feeds(kTokens), {Event::shift(2, 64, 5), Event::shift(7, 64, -5)}));
  EXPECT_EQ(there.positions, (std::vector<int32_t>{0, 1, 7, 8, 9, 10}));
  EXPECT_GT(largest_difference(there.k, plain.k), 1e-3);  // the moved keys did rotate
  EXPECT_EQ(there.v, plain.v);                            // values never move
  EXPECT_EQ(back.positions, plain.positions);
  EXPECT_LT(largest_difference(back.k, plain.k), 1e-12);
}

TEST(Replay, ShiftingEveryCellChangesNoLaterLogit) {
  // RoPE scores depend on relative positions only: moving every cell by 9
  // moves the next token with them.
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const CellOutput plain = replay(c, w, cat(feeds(kTokens), feeds({11, 2})));
  const CellOutput moved =
      replay(c, w, cat(cat(feeds(kTokens), {Event::shift(0, 64, 9)}), feeds({11, 2})));
  EXPECT_EQ(moved.positions.back(), 16);
  EXPECT_LT(largest_difference(last_row(moved, c.vocab), last_row(plain, c.vocab)), 1e-10);
}

TEST(Replay, AContextShiftIsNotARecomputeOfWhatRemains) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  // erase position 1, shift 2.. by -1, feed one more: the kept K/V of
  // positions 2..5 were computed with token 17 in their context.
  const CellOutput shifted = replay(
      c, w, cat(feeds(kTokens), {Event::erase(1, 2), Event::shift(2, 64, -1), Event::feed(7)}));
  EXPECT_EQ(shifted.positions, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  const Output recompute = forward(c, w, std::vector<int32_t>{3, 5, 40, 9, 22, 7});
  const std::vector<double> last(recompute.logits.end() - c.vocab, recompute.logits.end());
  EXPECT_GT(largest_difference(last_row(shifted, c.vocab), last), 1e-6);
  // Erasing the tail is a truncation: then it is the recompute.
  const CellOutput tail = replay(c, w, cat(feeds(kTokens), {Event::erase(4, 64), Event::feed(7)}));
  const Output cut = forward(c, w, std::vector<int32_t>{3, 17, 5, 40, 7});
  const std::vector<double> cut_last(cut.logits.end() - c.vocab, cut.logits.end());
  EXPECT_LT(largest_difference(last_row(tail, c.vocab), cut_last), 1e-12);
}

TEST(Replay, TheNextTokenGoesAfterTheLargestPosition) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const CellOutput r =
      replay(c, w, cat(feeds(kTokens), {Event::erase(1, 3), Event::feed(7), Event::feed(8)}));
  EXPECT_EQ(r.positions, (std::vector<int32_t>{0, 3, 4, 5, 6, 7}));
}

TEST(Replay, RefusesCollisionsNegativePositionsAndGpt2) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const auto error = [&](const Config& config, const std::vector<Event>& events) -> std::string {
    try {
      replay(config, init_weights(config, 3), events);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error(c, cat(feeds(kTokens), {Event::shift(3, 64, -1)})).find("two cells"),
            std::string::npos);
  EXPECT_NE(error(c, cat(feeds(kTokens), {Event::shift(0, 64, -1)})).find("leaves [0, max_pos)"),
            std::string::npos);
  EXPECT_NE(error(gpt2_tiny(), feeds(kTokens)).find("RoPE"), std::string::npos);
  (void)w;
}

// div (docs/OPERATIONS.md, "Div"): cells 0..5 divided by 2 hold 0, 0, 1,
// 1, 2, 2; each keeps the K/V it was computed with, its key rotated by
// its own change (p / 2 - p), and the next token, at 3, sees every one of
// them: dropping either cell of a shared position changes its logits.
TEST(Replay, DivSharesPositionsAndEveryCellStaysVisible) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const CellOutput plain = replay(c, w, feeds(kTokens));
  const CellOutput divided = replay(c, w, cat(feeds(kTokens), {Event::div(0, 64, 2)}));
  EXPECT_EQ(divided.positions, (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(divided.v, plain.v);
  std::vector<double> expected = plain.k;  // [L][C][KVH][D]
  const size_t D = size_t(c.head_dim), C = kTokens.size();
  for (size_t head = 0; head < expected.size() / D; ++head) {
    const int p = int(head / size_t(c.n_kv_heads) % C);
    apply_rope(std::span<double>(expected).subspan(head * D, D), p / 2 - p, c.rope_theta);
  }
  EXPECT_LT(largest_difference(divided.k, expected), 1e-12);
  EXPECT_GT(largest_difference(divided.k, plain.k), 1e-3);

  const auto next = [&](std::vector<Event> between) {
    std::vector<Event> events = cat(feeds(kTokens), {Event::div(0, 64, 2)});
    return replay(c, w, cat(cat(events, between), feeds({7})));
  };
  const CellOutput all = next({});
  EXPECT_EQ(all.positions.back(), 3);
  const CellOutput without_last = next({Event::truncate(1)});  // slot 5 goes, slot 4 stays at 2
  const CellOutput without_both = next({Event::erase(2, 3)});  // both cells at 2 go
  EXPECT_EQ(without_last.positions, (std::vector<int32_t>{0, 0, 1, 1, 2, 3}));
  EXPECT_EQ(without_both.positions, (std::vector<int32_t>{0, 0, 1, 1, 2}));
  EXPECT_GT(largest_difference(last_row(all, c.vocab), last_row(without_last, c.vocab)), 1e-6);
  EXPECT_GT(largest_difference(last_row(without_last, c.vocab), last_row(without_both, c.vocab)),
            1e-6);
}

// After a div, a shift moves cells that share a position together; only a
// moved cell onto a position a cell outside the range holds is refused.
TEST(Replay, AShiftAfterADivKeepsSharedPositions) {
  const Config c = model();
  const Weights w = init_weights(c, 3);
  const std::vector<Event> divided = cat(feeds(kTokens), {Event::div(2, 64, 2)});  // 0 1 1 1 2 2
  const CellOutput up = replay(c, w, cat(divided, {Event::shift(1, 64, 4)}));
  EXPECT_EQ(up.positions, (std::vector<int32_t>{0, 5, 5, 5, 6, 6}));
  std::string error;
  try {
    replay(c, w, cat(divided, {Event::shift(2, 3, -1)}));  // 2 -> 1, held by cells that stay
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("two cells"), std::string::npos) << error;
  try {
    replay(c, w, cat(feeds(kTokens), {Event::div(0, 64, 0)}));
    error = "no error";
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("d >= 1"), std::string::npos) << error;
}

}  // namespace
}  // namespace kvcheck::oracle
