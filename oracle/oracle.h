// The oracle: a deliberately naive model that recomputes the whole prefix in
// double precision. Plain loops, one function per op, readable as the
// specification of what the engine must compute. It shares the model's
// definition (config, weights) with the engine and nothing else.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck::oracle {

struct Output {
  int n_tokens = 0;            // T
  std::vector<double> logits;  // [T][V]
  std::vector<double> k;       // [L][T][KVH][D], after RoPE (llama), as a cache holds it
  std::vector<double> v;       // [L][T][KVH][D]

  double logit(int t, int vocab_index, int vocab) const {
    return logits[static_cast<size_t>(t) * vocab + vocab_index];
  }
};

// Runs tokens at absolute positions 0..T-1. Tokens must be in [0, vocab) and
// T <= max_pos; violations throw InputError.
Output forward(const Config& config, const Weights& weights, std::span<const int32_t> tokens);

// The first n rows of each of `blocks` blocks of `rows` rows: [blocks][rows][W]
// -> [blocks][n][W] (W = data.size() / (blocks * rows)).
std::vector<double> first_rows(const std::vector<double>& data, int blocks, int rows, int n);

// forward() of the first n <= T tokens, taken from forward() of all T: a
// position reads positions up to itself only, and each is computed the same
// way whatever follows it, so the two agree bit for bit (tested).
Output prefix(const Output& full, int n, int n_layers);

// The cache-level definition of erase and shift (docs/ORACLE.md, "Context
// shift"): one sequence's history of events, replayed cell by cell. A fed
// token goes at the largest held position + 1 (0 when empty), computes its
// K/V once, from the cells alive then at their positions then, and keeps
// them: an erase removes cells, a shift moves their positions (a key is
// always the token's un-rotated key rotated to the cell's current position;
// values never change), a div divides them (rounding down; cells may then
// share a position, and every held cell stays visible to the next token,
// whose position is above them all), a truncation drops the last n cells.
struct Event {
  enum class Kind : uint8_t { kFeed, kErase, kShift, kTruncate, kDiv };
  Kind kind = Kind::kFeed;
  int32_t token = 0;   // kFeed
  int p0 = 0, p1 = 0;  // kErase, kShift, kDiv: positions [p0, p1)
  int delta = 0;       // kShift; kDiv: the divisor d >= 1
  int n = 0;           // kTruncate: cells dropped from the end

  static Event feed(int32_t t) { return {Kind::kFeed, t}; }
  static Event erase(int p0, int p1) { return {Kind::kErase, 0, p0, p1}; }
  static Event shift(int p0, int p1, int d) { return {Kind::kShift, 0, p0, p1, d}; }
  static Event truncate(int n) { return {Kind::kTruncate, 0, 0, 0, 0, n}; }
  static Event div(int p0, int p1, int d) { return {Kind::kDiv, 0, p0, p1, d}; }
};

struct CellOutput {
  std::vector<double> logits;      // [feeds][V] one row per kFeed event, in order
  std::vector<int32_t> positions;  // [C] the cells alive after the last event, in slot order
  std::vector<double> k;           // [L][C][KVH][D] rotated to each cell's current position
  std::vector<double> v;           // [L][C][KVH][D]
};

// llama family only; invalid events (a shift moving a cell onto a position
// a cell outside its range holds, or out of [0, max_pos), a div by d < 1, a truncation past the
// cells, a position reaching max_pos) throw InputError naming the event.
CellOutput replay(const Config& config, const Weights& weights, std::span<const Event> events);

}  // namespace kvcheck::oracle
