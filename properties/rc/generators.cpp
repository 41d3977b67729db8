#include "properties/rc/generators.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <utility>

namespace kvcheck::rcgen {
namespace {

// gen::weightedElement does not shrink in this RapidCheck (its value has no
// shrinks), so biased choices are made here from a uniform index that shrinks
// toward 0: options are listed simplest first and a shrink walks toward them.
// The index ignores the size so edge cases are as likely in the first cases as
// in the last.
template <typename T>
rc::Gen<T> weighted_choice(std::vector<std::pair<int, T>> options) {
  const int total = std::accumulate(options.begin(), options.end(), 0,
                                    [](int sum, const auto& o) { return sum + o.first; });
  return rc::gen::map(rc::gen::resize(100, rc::gen::inRange(0, total)), [options](int u) {
    for (const auto& [weight, value] : options) {
      if (u < weight) return value;
      u -= weight;
    }
    return options.back().second;
  });
}

// As above, between generators: the choice shrinks first, then the value.
template <typename T>
rc::Gen<T> weighted_gen(std::vector<std::pair<int, rc::Gen<T>>> options) {
  std::vector<std::pair<int, int>> indices;
  for (size_t i = 0; i < options.size(); ++i) indices.push_back({options[i].first, int(i)});
  std::vector<rc::Gen<T>> gens;
  for (auto& o : options) gens.push_back(std::move(o.second));
  return rc::gen::join(
      rc::gen::map(weighted_choice(std::move(indices)), [gens](int i) { return gens[size_t(i)]; }));
}

// Inclusive range, scaled by RapidCheck's size, shrinking toward lo.
rc::Gen<int> between(int lo, int hi) {
  return rc::gen::inRange(lo, hi + 1);
}

rc::Gen<bool> rarely_true(int weight_false, int weight_true) {
  return weighted_choice<bool>({{weight_false, false}, {weight_true, true}});
}

// A vector whose length is drawn from `count` and which shrinks by removing
// any run of elements (never below min_count) and by shrinking each element.
// gen::container ties the length to the size (0..size) and gen::mapcat over a
// count can only drop the tail; removal from the middle is what lets a
// counterexample lose the sequence that does not matter.
template <typename T>
rc::Gen<std::vector<T>> vector_of(rc::Gen<int> count, size_t min_count, rc::Gen<T> element) {
  using Elements = std::vector<rc::Shrinkable<T>>;
  return [=](const rc::Random& random, int size) {
    rc::Random r = random;
    const int n = std::max(int(min_count), count(r.split(), size).value());
    Elements elements;
    for (int i = 0; i < n; ++i) elements.push_back(element(r.split(), size));
    return rc::shrinkable::map(
        rc::shrinkable::shrinkRecur(
            std::move(elements),
            [min_count](const Elements& e) {
              return rc::seq::concat(
                  rc::seq::filter(rc::shrink::removeChunks(e),
                                  [min_count](const Elements& x) { return x.size() >= min_count; }),
                  rc::shrink::eachElement(e,
                                          [](const rc::Shrinkable<T>& s) { return s.shrinks(); }));
            }),
        [](const Elements& e) {
          std::vector<T> values;
          values.reserve(e.size());
          for (const auto& s : e) values.push_back(s.value());
          return values;
        });
  };
}

rc::Gen<ModelGenes> model_genes(Emphasis emphasis) {
  // MQA (1 KV head) and group sizes 2 and 4 are where head mappings go wrong.
  rc::Gen<int> kv_heads =
      weighted_choice<int>({{6, 1}, {4, 2}, {1, 3}, {2, 4}, {1, 5}, {1, 6}, {1, 7}, {1, 8}});
  rc::Gen<int> group =
      emphasis == Emphasis::kSharedKvHeads
          ? weighted_choice<int>({{5, 2}, {1, 3}, {4, 4}, {1, 5}, {1, 6}, {1, 7}, {1, 8}})
          : weighted_choice<int>({{4, 1}, {4, 2}, {1, 3}, {3, 4}, {1, 5}, {1, 6}, {1, 7}, {1, 8}});
  if (emphasis == Emphasis::kSharedKvHeads) {
    // Keep room for a group of 2 or more under kMaxHeads.
    kv_heads = weighted_choice<int>({{6, 1}, {4, 2}, {1, 3}, {2, 4}});
  }
  return rc::gen::build<ModelGenes>(
      rc::gen::set(&ModelGenes::n_layers, between(1, kMaxLayers)),
      rc::gen::set(&ModelGenes::n_kv_heads, kv_heads), rc::gen::set(&ModelGenes::group, group),
      rc::gen::set(&ModelGenes::family,
                   emphasis == Emphasis::kContextShift
                       ? rc::gen::just(Family::kLlama)
                       : weighted_choice<Family>({{1, Family::kGpt2}, {1, Family::kLlama}})),
      // Mostly 2..8 wide: small heads are fast and lose nothing a cache can break.
      rc::gen::set(&ModelGenes::half_head_dim,
                   weighted_gen<int>({{8, between(1, 4)}, {1, between(1, 16)}})),
      rc::gen::set(&ModelGenes::d_model, between(4, 32)),
      rc::gen::set(&ModelGenes::d_ff, between(4, 48)),
      rc::gen::set(&ModelGenes::vocab, between(8, 64)),
      rc::gen::set(&ModelGenes::qkv_bias, rarely_true(3, 1)),
      rc::gen::set(&ModelGenes::max_pos_slack,
                   weighted_gen<int>({{3, rc::gen::just(0)}, {1, between(1, 16)}})),
      rc::gen::set(&ModelGenes::weight_seed, rc::gen::inRange<uint64_t>(0, 1000)));
}

rc::Gen<SequenceGenes> sequence_genes() {
  // Chunk length 1 (token-by-token prefill) and "the rest at once" are the
  // edges; 0 comes first so chunk genes shrink toward fewer, longer chunks.
  rc::Gen<int> chunk = weighted_gen<int>({{1, rc::gen::just(0)},
                                          {3, rc::gen::just(1)},
                                          {4, between(1, 16)},
                                          {1, between(1, kMaxPrompt)}});
  const rc::Gen<SequenceGenes> genes = rc::gen::build<SequenceGenes>(
      rc::gen::set(&SequenceGenes::prompt_length,
                   weighted_gen<int>(
                       {{2, rc::gen::just(1)}, {5, between(1, 8)}, {3, between(1, kMaxPrompt)}})),
      rc::gen::set(&SequenceGenes::decode_length,
                   weighted_gen<int>(
                       {{3, rc::gen::just(0)}, {4, between(0, 4)}, {2, between(0, kMaxDecode)}})),
      rc::gen::set(
          &SequenceGenes::chunk_lengths,
          vector_of<int>(weighted_choice<int>({{2, 0}, {3, 1}, {3, 2}, {2, 4}, {1, 8}}), 0, chunk)),
      rc::gen::set(&SequenceGenes::finishes, rarely_true(2, 1)),
      rc::gen::set(&SequenceGenes::start_delay,
                   weighted_gen<int>({{3, rc::gen::just(0)}, {2, between(1, 6)}})),
      rc::gen::set(&SequenceGenes::reset_before, rarely_true(6, 1)),
      rc::gen::set(&SequenceGenes::shared_prefix,
                   // Not scaled by the size: small cases need sharing too.
                   weighted_gen<int>({{1, rc::gen::just(0)},
                                      {3, rc::gen::resize(100, between(1, 8))},
                                      {2, rc::gen::resize(100, between(1, 24))}})));
  // One more move after the gene-wise shrinks: fold the first decode token
  // into the prompt. It keeps the tokens and lets the whole prompt go in one
  // chunk, so p(2) p(1) (prompt 2, one decode) can become p(3); prompt length
  // and decode count shrinking on their own never get there (growing the
  // prompt is not a shrink). Each fold lowers the decode count, so shrinking
  // still ends.
  return rc::gen::shrink(genes, [](const SequenceGenes& g) {
    if (g.decode_length == 0 || g.prompt_length >= kMaxPrompt) {
      return rc::seq::fromContainer(std::vector<SequenceGenes>{});
    }
    SequenceGenes folded = g;
    ++folded.prompt_length;
    --folded.decode_length;
    return rc::seq::fromContainer(std::vector<SequenceGenes>{folded});
  });
}

rc::Gen<OpGenes> op_genes(Emphasis emphasis) {
  const bool shift = emphasis == Emphasis::kContextShift;
  return rc::gen::build<OpGenes>(
      // Operations apply after step 1 on (steps_so_far counts the step just
      // run): a shift's 0 would be lost.
      rc::gen::set(&OpGenes::after_step, shift ? between(1, 3) : between(0, 12)),
      rc::gen::set(&OpGenes::truncate, rarely_true(1, 1)),
      rc::gen::set(&OpGenes::target, between(0, kMaxSequences - 1)),
      rc::gen::set(&OpGenes::amount, between(0, kMaxPrompt)),
      rc::gen::set(&OpGenes::snap, weighted_choice<int>({{3, 0}, {2, 1}, {1, 2}})),
      rc::gen::set(&OpGenes::child_tokens, between(0, 8)),
      rc::gen::set(&OpGenes::child_finishes, rarely_true(2, 1)),
      rc::gen::set(&OpGenes::flush, shift ? rc::gen::just(false) : rarely_true(4, 1)),
      rc::gen::set(&OpGenes::context_shift,
                   shift ? weighted_choice<int>({{3, 1}, {1, 2}, {1, 3}})
                         : weighted_choice<int>({{6, 0}, {3, 1}, {1, 2}, {1, 3}})));
}

}  // namespace

rc::Gen<ScenarioGenes> scenario_genes(Emphasis emphasis) {
  const bool shift = emphasis == Emphasis::kContextShift;
  const rc::Gen<int> sequence_count =
      weighted_choice<int>({{4, 1}, {4, 2}, {2, 3}, {1, 4}, {1, 5}, {1, 6}});
  // 0 (all running sequences in one step) is the shrink target and the most
  // common: ragged batches are what the properties compare against solo runs.
  const rc::Gen<int> step_mask =
      weighted_gen<int>({{4, rc::gen::just(0)}, {3, rc::gen::inRange(1, 1 << kMaxSequences)}});
  return rc::gen::build<ScenarioGenes>(
      rc::gen::set(&ScenarioGenes::model, model_genes(emphasis)),
      rc::gen::set(&ScenarioGenes::sequences, vector_of(sequence_count, 1, sequence_genes())),
      rc::gen::set(
          &ScenarioGenes::step_masks,
          vector_of<int>(weighted_choice<int>({{1, 0}, {2, 4}, {2, 12}, {1, 32}}), 0, step_mask)),
      // Slack 0 is the edge (a chunk ends exactly at capacity) and the most
      // common, but slack shrinks toward 1: at capacity 1 a misplaced slot or
      // position wraps onto the right one and hides the fault, so a shrink
      // that drops a token would otherwise stop at a larger case.
      rc::gen::set(
          &ScenarioGenes::capacity_slack,
          weighted_gen<int>({{2, rc::gen::just(1)}, {3, rc::gen::just(0)}, {1, between(2, 16)}})),
      rc::gen::set(&ScenarioGenes::spare_rows, weighted_choice<int>({{4, 0}, {1, 1}, {1, 3}})),
      rc::gen::set(
          &ScenarioGenes::kv_dtype,
          weighted_choice<KvDtype>(
              {{8, KvDtype::kF32}, {1, KvDtype::kBF16}, {1, KvDtype::kF16}, {2, KvDtype::kQ8_0}})),
      rc::gen::set(&ScenarioGenes::token_seed, rc::gen::inRange<uint64_t>(0, 1000)),
      rc::gen::set(
          &ScenarioGenes::ops,
          vector_of<OpGenes>(shift ? weighted_choice<int>({{2, 1}, {2, 2}, {1, 4}})
                                   : weighted_choice<int>({{3, 0}, {2, 1}, {2, 2}, {1, 4}}),
                             shift ? 1 : 0, op_genes(emphasis))),
      // Contiguous first (the shrink target), then the edges 1 and 16, any B.
      rc::gen::set(&ScenarioGenes::block_size, shift ? rc::gen::just(0)
                                                     : weighted_gen<int>({{2, rc::gen::just(0)},
                                                                          {1, rc::gen::just(1)},
                                                                          {1, rc::gen::just(16)},
                                                                          {2, between(1, 32)}})),
      rc::gen::set(&ScenarioGenes::prefix_cache, rarely_true(1, 2)),
      rc::gen::set(
          &ScenarioGenes::pool_slack,
          weighted_gen<int>({{3, rc::gen::just(-1)}, {1, rc::gen::just(0)}, {3, between(1, 6)}})),
      // No window (the shrink target) a third of the time; else W small against
      // the prompts (rings that wrap, chunks across the edge) or as long.
      rc::gen::set(&ScenarioGenes::sliding_window,
                   shift ? rc::gen::just(0)
                         : weighted_gen<int>({{2, rc::gen::just(0)},
                                              {2, between(1, 4)},
                                              {1, between(1, 16)},
                                              {1, between(1, kMaxPrompt)}})),
      rc::gen::set(&ScenarioGenes::window_pattern,
                   weighted_gen<int>({{3, rc::gen::just(0)}, {1, between(2, 3)}})));
}

namespace {

// splitmix64: the portable mixer tokens are drawn from, so a scenario's
// tokens are the same bits on every platform.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One sequence's feeding plan: its chunks in order, then what follows.
struct Plan {
  std::vector<int> chunks;  // prompt chunks, then one 1-token chunk per decode token
  bool finishes = false;
  int start_delay = 0;
  int epoch = 0;  // resets before it
  bool reset_before = false;
  size_t next = 0;  // next chunk to feed
  bool has_tokens_left() const { return next < chunks.size(); }
};

Plan plan_of(const SequenceGenes& g, int max_chunk) {
  Plan plan;
  const int prompt = std::clamp(g.prompt_length, 1, kMaxPrompt);
  int left = prompt;
  for (int c : g.chunk_lengths) {
    if (left == 0) break;
    if (c <= 0 || c >= left) break;
    plan.chunks.push_back(std::min(c, max_chunk));
    left -= plan.chunks.back();
  }
  for (; left > 0; left -= plan.chunks.back()) plan.chunks.push_back(std::min(left, max_chunk));
  const int decode = std::clamp(g.decode_length, 0, kMaxDecode);
  plan.chunks.insert(plan.chunks.end(), size_t(decode), 1);
  plan.finishes = g.finishes;
  plan.start_delay = std::max(0, g.start_delay);
  plan.reset_before = g.reset_before;
  return plan;
}

}  // namespace

namespace {

// The smallest multiple of `multiple` (and of 2: RoPE pairs) at or above
// `value`, kept inside [lo, hi] (validated traits leave one there).
int fit_dimension(int value, int lo, int hi, int multiple) {
  const int step = std::lcm(2, multiple);
  int v = std::max(value, lo);
  v = (v + step - 1) / step * step;
  while (v > hi && v - step >= 1) v -= step;
  return v;
}

// The model genes, moved into what the engine declares it accepts.
void fit_model(Config& c, KvDtype& kv_dtype, const ShapeLimits& limits) {
  if (!accepts_family(limits, c.family)) c.family = limits.families.front();
  if (!accepts_kv_dtype(limits, kv_dtype)) kv_dtype = limits.kv_dtypes.front();
  c.n_layers = std::min(c.n_layers, limits.max_layers);
  c.head_dim =
      fit_dimension(c.head_dim, limits.min_head_dim, limits.max_head_dim, limits.head_dim_multiple);
  c.d_model =
      fit_dimension(c.d_model, limits.min_d_model, limits.max_d_model, limits.d_model_multiple);
  c.vocab = std::clamp(c.vocab, std::max(2, limits.min_vocab), limits.max_vocab);
  if (c.vocab < limits.min_vocab) c.vocab = limits.min_vocab;
}

}  // namespace

namespace {

// A checkpoint's context holds at most max_pos positions: each sequence (or,
// in one shared context, all of them together) is cut to fit, dropping
// whole sequences only when there are more than positions.
void fit_context(std::vector<Plan>& plans, int max_pos, bool shared) {
  if (shared && int(plans.size()) > max_pos) plans.resize(size_t(max_pos));
  const int budget = shared ? max_pos / int(plans.size()) : max_pos;
  for (Plan& plan : plans) {
    int total = 0;
    size_t keep = 0;
    for (; keep < plan.chunks.size() && total + plan.chunks[keep] <= budget; ++keep) {
      total += plan.chunks[keep];
    }
    if (keep < plan.chunks.size() && total < budget) {
      plan.chunks[keep] = budget - total;  // the chunk that crosses the budget, shortened
      ++keep;
    }
    plan.chunks.resize(keep);
    if (plan.chunks.empty()) plan.chunks.push_back(1);
  }
}

}  // namespace

Scenario decode(const ScenarioGenes& genes, const EngineTraits& traits,
                const std::shared_ptr<const Checkpoint>& model) {
  Scenario s;
  const ModelGenes& m = genes.model;
  const OperationTraits& ops = traits.operations;
  const ShapeLimits& limits = traits.limits;
  Config& c = s.config;
  c.family = m.family;
  c.n_layers = std::clamp(m.n_layers, 1, kMaxLayers);
  c.n_kv_heads = std::clamp(m.n_kv_heads, 1, kMaxHeads);
  c.n_heads = c.n_kv_heads * std::clamp(m.group, 1, kMaxHeads / c.n_kv_heads);
  c.head_dim = 2 * std::clamp(m.half_head_dim, 1, 16);
  c.d_model = std::clamp(m.d_model, 1, 32);
  c.d_ff = std::clamp(m.d_ff, 1, 64);
  c.vocab = std::clamp(m.vocab, 2, 64);
  s.kv_dtype = genes.kv_dtype;
  // q8_0 keeps one scale per 32 elements of a head: a wide head has a full
  // block and a partial one (the per-block faults need two blocks or heads).
  // A third of the q8_0 scenarios, chosen by the token seed rather than a
  // gene of its own, so the other genes keep drawing what they drew before.
  if (s.kv_dtype == KvDtype::kQ8_0 && genes.token_seed % 3 == 0) c.head_dim += int(kQ8Block);
  fit_model(c, s.kv_dtype, limits);
  c.qkv_bias = c.family == Family::kGpt2 && m.qkv_bias;
  s.weight_seed = m.weight_seed;
  if (model) {
    // The engine takes the checkpoint or declares it cannot (traits_exclude).
    c = model->config;
    s.model = model;
    s.weight_seed = 0;
  }

  // Without finish or reset no row is ever freed, so at most max_rows
  // sequences in all; with them, rows still bound each epoch (kept simple:
  // the same cap).
  const size_t max_sequences = size_t(std::min(kMaxSequences, limits.max_rows));
  std::vector<Plan> plans;
  for (const SequenceGenes& g : genes.sequences) {
    if (plans.size() == max_sequences) break;
    SequenceGenes fitted = g;
    fitted.finishes = g.finishes && ops.finish;
    fitted.reset_before = g.reset_before && ops.reset;
    plans.push_back(plan_of(fitted, limits.max_step_tokens));
    // A prompt that shares a prefix with the one before it (prefix cache):
    // it starts once that one has been fed a chunk, and its first chunk
    // covers the shared tokens and one more, so that a hit can happen.
    const int shared = std::max(0, g.shared_prefix);
    if (plans.size() > 1 && shared > 0 && ops.prefix_cache && genes.prefix_cache) {
      Plan& p = plans.back();
      p.start_delay = std::max(p.start_delay, plans[plans.size() - 2].start_delay + 2);
      while (p.chunks.size() > 1 && p.chunks[0] <= shared &&
             p.chunks[0] + p.chunks[1] <= limits.max_step_tokens) {
        p.chunks[0] += p.chunks[1];
        p.chunks.erase(p.chunks.begin() + 1);
      }
      // Too short a prompt shares nothing: it grows to the shared tokens and one.
      p.chunks[0] =
          std::max(p.chunks[0], std::min({shared + 1, kMaxPrompt, limits.max_step_tokens}));
    }
  }
  if (plans.empty()) plans.push_back(plan_of(SequenceGenes{}, limits.max_step_tokens));
  if (model) fit_context(plans, c.max_pos, limits.capacity_shared);

  // Paged storage and a prefix cache only where the engine declares them.
  s.block_size = ops.paged ? std::clamp(genes.block_size, 0, 32) : 0;
  // A sliding window where the engine declares one, on contiguous storage
  // only: no engine combines it with paged storage, fork or truncate
  // (traits_exclude), so a windowed scenario draws no fork or truncation,
  // and paged scenarios (the prefix cache's faults live there) keep theirs.
  if (ops.sliding_window && !model && s.block_size == 0) {
    c.sliding_window = std::clamp(genes.sliding_window, 0, kMaxPrompt + kMaxDecode);
    if (c.sliding_window > 0) {
      c.sliding_window_pattern = std::clamp(genes.window_pattern, 0, kMaxLayers);
    }
  }
  const bool windowed = c.sliding_window > 0;
  s.prefix_cache = s.block_size > 0 && ops.prefix_cache && genes.prefix_cache;
  // A hit needs a prompt longer than a block: prefix scenarios keep B in 1..4.
  if (s.prefix_cache) s.block_size = 1 + (s.block_size - 1) % 4;
  int longest = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    const int total = std::accumulate(plans[i].chunks.begin(), plans[i].chunks.end(), 0);
    longest = std::max(longest, total);
    std::vector<int32_t> tokens(static_cast<size_t>(total));
    for (int t = 0; t < total; ++t) {
      tokens[size_t(t)] =
          int32_t(mix(mix(genes.token_seed * 64 + i) + uint64_t(t)) % uint64_t(c.vocab));
    }
    // A prompt that starts like the one before it (alive or finished by
    // then): what a prefix cache reuses.
    if (s.prefix_cache && i > 0) {
      const std::vector<int32_t>& before = s.sequences.back();
      const size_t shared = std::min(
          {size_t(std::max(0, genes.sequences[i].shared_prefix)), before.size(), tokens.size()});
      std::copy_n(before.begin(), shared, tokens.begin());
    }
    s.sequences.push_back(std::move(tokens));
    plans[i].epoch = (i == 0 ? 0 : plans[i - 1].epoch) + (plans[i].reset_before ? 1 : 0);
  }

  // Schedule: epochs are separated by resets; inside one, sequences start by
  // their delay (counted in steps of the epoch), each step feeds the next
  // chunk of the running sequences its mask selects, and a sequence that
  // finishes does so right after its last chunk.
  size_t next_mask = 0;
  int running_now = 0, running_peak = 0;
  const int last_epoch = plans.back().epoch;
  // The operations: what each sequence holds now, and the block size they
  // snap to (4 when contiguous, so that snapping still means something).
  const int snap_block = s.block_size > 0 ? s.block_size : 4;
  std::vector<int> held(plans.size(), 0);  // [sequence] content length
  int max_content = 0, steps_so_far = 0, forks = 0;
  const auto apply_ops = [&](std::vector<int>& running) {
    for (const OpGenes& op : genes.ops) {
      if (op.after_step != steps_so_far) continue;
      if (op.flush) {
        if (s.prefix_cache) s.calls.push_back(Call::flush());
        continue;
      }
      if (running.empty()) continue;
      const int target = running[size_t(std::max(0, op.target)) % running.size()];
      const int length = held[size_t(target)];
      const int amount = std::max(0, op.amount) % (length + 1);
      if (op.context_shift > 0 && ops.erase && ops.shift && c.family == Family::kLlama &&
          s.block_size == 0 && !windowed && length > 0) {
        const int n = std::max(1, amount);
        const int keep = std::clamp(op.child_tokens, 0, 8) % (length - n + 1);
        if (op.context_shift == 2) {
          s.calls.push_back(Call::erase(target, keep, c.max_pos));
          held[size_t(target)] = keep;
          continue;
        }
        // 3: the same context shift twice in a row, while it fits.
        for (int round = 0; round < (op.context_shift == 3 ? 2 : 1); ++round) {
          const int now = held[size_t(target)];
          if (keep + n > now) break;
          s.calls.push_back(Call::erase(target, keep, keep + n));
          if (keep + n < now) s.calls.push_back(Call::shift(target, keep + n, c.max_pos, -n));
          held[size_t(target)] -= n;
        }
        continue;
      }
      if (op.truncate) {
        if (!ops.truncate || windowed || length == 0) continue;
        const int to_boundary =
            length % snap_block != 0 ? length % snap_block : std::min(length, snap_block);
        const int n = op.snap == 2 ? length : op.snap == 1 ? to_boundary : amount;
        s.calls.push_back(Call::truncate(target, n));
        held[size_t(target)] -= n;
        continue;
      }
      if (!ops.fork || windowed || forks == 4 || running_now >= limits.max_rows) continue;
      const int n = op.snap == 2   ? length
                    : op.snap == 1 ? length / snap_block * snap_block
                                   : amount;
      const int child = static_cast<int>(plans.size());
      Plan plan;
      const int tokens = std::clamp(op.child_tokens, 0, 8);
      if (tokens > 0) plan.chunks.push_back(std::clamp(tokens / 2, 1, limits.max_step_tokens));
      for (int fed = plan.chunks.empty() ? 0 : plan.chunks[0]; fed < tokens; ++fed) {
        plan.chunks.push_back(1);
      }
      plan.finishes = op.child_finishes && traits.operations.finish;
      plan.epoch = -1;  // started by its fork, never by an epoch
      plans.push_back(plan);
      std::vector<int32_t> child_tokens(static_cast<size_t>(tokens));  // [token]
      for (int t = 0; t < tokens; ++t) {
        child_tokens[size_t(t)] = int32_t(
            mix(mix(genes.token_seed * 64 + uint64_t(child)) + uint64_t(t)) % uint64_t(c.vocab));
      }
      s.sequences.push_back(std::move(child_tokens));
      held.push_back(n);
      s.calls.push_back(Call::fork(child, target, n));
      running.push_back(child);
      running_peak = std::max(running_peak, ++running_now);
      max_content = std::max(max_content, n + tokens);
      ++forks;
    }
  };
  for (int epoch = 0; epoch <= last_epoch; ++epoch) {
    std::vector<int> pending;
    for (size_t i = 0; i < plans.size(); ++i) {
      if (plans[i].epoch == epoch) pending.push_back(int(i));
    }
    if (epoch > 0) {
      s.calls.push_back(Call::reset());
      running_now = 0;
    }
    std::stable_sort(pending.begin(), pending.end(), [&](int a, int b) {
      return plans[size_t(a)].start_delay < plans[size_t(b)].start_delay;
    });
    std::vector<int> running;
    size_t next_pending = 0;
    auto start_next = [&] {
      const int i = pending[next_pending++];
      s.calls.push_back(Call::start(i));
      running.push_back(i);
      running_peak = std::max(running_peak, ++running_now);
    };
    for (int steps = 0;; ++steps) {
      while (next_pending < pending.size() &&
             plans[size_t(pending[next_pending])].start_delay <= steps) {
        start_next();
      }
      std::vector<int> feedable;
      for (int i : running) {
        if (plans[size_t(i)].has_tokens_left()) feedable.push_back(i);
      }
      if (feedable.empty()) {
        if (next_pending == pending.size()) break;
        start_next();  // nothing to feed until then, so it starts early
        feedable.push_back(running.back());
      }
      const int mask = next_mask < genes.step_masks.size() ? genes.step_masks[next_mask++] : 0;
      std::vector<int> chosen;
      for (size_t k = 0; k < feedable.size(); ++k) {
        if ((mask >> k) & 1) chosen.push_back(feedable[k]);
      }
      if (chosen.empty()) chosen = feedable;
      if (!ops.multi_sequence_step) chosen.resize(1);
      std::vector<ChunkSpec> batch;
      int step_tokens = 0;
      for (size_t k = 0; k < chosen.size(); ++k) {
        Plan& p = plans[size_t(chosen[k])];
        if (k > 0 && step_tokens + p.chunks[p.next] > limits.max_step_tokens) {
          chosen.resize(k);  // the rest wait for a later step
          break;
        }
        step_tokens += p.chunks[p.next];
        batch.push_back({chosen[k], p.chunks[p.next++]});
      }
      for (const ChunkSpec& chunk : batch) {
        held[size_t(chunk.sequence)] += chunk.length;
        max_content = std::max(max_content, held[size_t(chunk.sequence)]);
      }
      s.calls.push_back(Call::step(std::move(batch)));
      for (int i : chosen) {
        const Plan& p = plans[size_t(i)];
        if (!p.has_tokens_left() && p.finishes) {
          s.calls.push_back(Call::finish(i));
          running.erase(std::find(running.begin(), running.end(), i));
          --running_now;
        }
      }
      ++steps_so_far;
      apply_ops(running);
    }
  }

  // One shared context must hold every sequence at once (a conservative
  // bound: all of them, not only those alive together).
  int needed = std::max(longest, max_content);
  if (limits.capacity_shared) {
    needed = 0;
    for (const std::vector<int32_t>& tokens : s.sequences) needed += int(tokens.size());
  }
  s.capacity = std::min(needed + std::clamp(genes.capacity_slack, 0, 16),
                        std::max(needed, limits.max_capacity));
  s.max_rows = std::max(1, running_peak) + std::clamp(genes.spare_rows, 0, 3);
  if (s.block_size > 0 && genes.pool_slack >= 0) {
    const int longest_blocks = (std::max(longest, max_content) + s.block_size - 1) / s.block_size;
    s.pool_blocks = std::max(1, longest_blocks - 1 + std::min(genes.pool_slack, 16));
  }
  if (model) {
    s.capacity = std::min(s.capacity, c.max_pos);  // fit_context kept `needed` within it
  } else {
    c.max_pos = s.capacity + std::clamp(m.max_pos_slack, 0, 16);
  }
  return s;
}

rc::Gen<Scenario> scenario(Emphasis emphasis, const EngineTraits& traits,
                           std::shared_ptr<const Checkpoint> model) {
  return rc::gen::map(scenario_genes(emphasis),
                      [traits, model](const ScenarioGenes& g) { return decode(g, traits, model); });
}

Coverage& Coverage::operator|=(const Coverage& o) {
  for (auto member : {&Coverage::gpt2,
                      &Coverage::mha,
                      &Coverage::gqa,
                      &Coverage::mqa,
                      &Coverage::batched_step,
                      &Coverage::mixed_step,
                      &Coverage::one_token_chunk,
                      &Coverage::reset,
                      &Coverage::finish,
                      &Coverage::reused_row,
                      &Coverage::at_capacity,
                      &Coverage::reduced_dtype,
                      &Coverage::paged,
                      &Coverage::fork,
                      &Coverage::fork_mid_block,
                      &Coverage::fork_at_boundary,
                      &Coverage::truncate,
                      &Coverage::truncate_to_zero,
                      &Coverage::truncate_across_blocks,
                      &Coverage::q8_multi_block,
                      &Coverage::prefix_cache,
                      &Coverage::flush,
                      &Coverage::small_pool,
                      &Coverage::shared_prompt,
                      &Coverage::window,
                      &Coverage::window_wraps,
                      &Coverage::window_straddle,
                      &Coverage::erase,
                      &Coverage::shift,
                      &Coverage::shifts_in_a_row}) {
    this->*member = this->*member || o.*member;
  }
  return *this;
}

Coverage coverage(const Scenario& s) {
  Coverage cov;
  const Config& c = s.config;
  cov.gpt2 = c.family == Family::kGpt2;
  cov.mha = c.n_kv_heads == c.n_heads;
  cov.mqa = c.n_kv_heads == 1 && c.n_heads > 1;
  cov.gqa = c.n_kv_heads > 1 && c.n_kv_heads < c.n_heads;
  cov.reduced_dtype = s.kv_dtype != KvDtype::kF32;
  cov.q8_multi_block = s.kv_dtype == KvDtype::kQ8_0 && c.head_dim > int(kQ8Block);

  std::vector<int> fed(s.sequences.size(), 0);
  std::vector<bool> shifted(s.sequences.size(), false);  // [sequence] shifted before
  std::vector<bool> had_one_token_chunk(s.sequences.size(), false);
  bool finished_since_reset = false;
  for (const Call& call : s.calls) {
    switch (call.kind) {
      case Call::Kind::kStart: {
        if (finished_since_reset) cov.reused_row = true;
        const std::vector<int32_t>& mine = s.sequences[size_t(call.sequence)];
        for (int e = 0; e < call.sequence && s.block_size > 0; ++e) {
          const std::vector<int32_t>& earlier = s.sequences[size_t(e)];
          const size_t B = size_t(s.block_size);
          cov.shared_prompt =
              cov.shared_prompt ||
              (mine.size() > B && earlier.size() >= B &&
               std::equal(mine.begin(), mine.begin() + std::ptrdiff_t(B), earlier.begin()));
        }
        break;
      }
      case Call::Kind::kFlush:
        cov.flush = true;
        break;
      case Call::Kind::kStep: {
        bool prefill = false, decode_token = false;
        cov.batched_step = cov.batched_step || call.chunks.size() >= 2;
        for (const ChunkSpec& chunk : call.chunks) {
          const size_t i = size_t(chunk.sequence);
          if (chunk.length == 1) {
            had_one_token_chunk[i] = true;
            decode_token = true;
          } else {
            prefill = true;
            if (had_one_token_chunk[i]) cov.one_token_chunk = true;
          }
          const int W = c.sliding_window;
          if (W > 0 && fed[i] / W != (fed[i] + chunk.length - 1) / W && chunk.length > 1) {
            cov.window_straddle = true;
          }
          fed[i] += chunk.length;
          if (fed[i] == s.capacity) cov.at_capacity = true;
          if (W > 0 && fed[i] > W) cov.window_wraps = true;
        }
        cov.mixed_step = cov.mixed_step || (prefill && decode_token);
        break;
      }
      case Call::Kind::kFinish:
        cov.finish = true;
        finished_since_reset = true;
        break;
      case Call::Kind::kReset:
        cov.reset = true;
        finished_since_reset = false;
        break;
      case Call::Kind::kFork: {
        const int n = call.count, block = s.block_size > 0 ? s.block_size : 1;
        cov.fork = true;
        cov.fork_mid_block = cov.fork_mid_block || (s.block_size > 0 && n % block != 0);
        cov.fork_at_boundary = cov.fork_at_boundary || (s.block_size > 0 && n % block == 0);
        fed[size_t(call.sequence)] = n;
        break;
      }
      case Call::Kind::kTruncate: {
        const size_t i = size_t(call.sequence);
        const int before = fed[i], after = fed[i] - call.count;
        cov.truncate = true;
        cov.truncate_to_zero = cov.truncate_to_zero || (after == 0 && before > 0);
        cov.truncate_across_blocks =
            cov.truncate_across_blocks ||
            (s.block_size > 0 && before / s.block_size != after / s.block_size);
        fed[i] = after;
        break;
      }
      case Call::Kind::kErase:
        cov.erase = true;
        break;
      case Call::Kind::kShift:
        cov.shifts_in_a_row = cov.shifts_in_a_row || (cov.shift && shifted[size_t(call.sequence)]);
        cov.shift = true;
        shifted[size_t(call.sequence)] = true;
        break;
    }
  }
  cov.paged = s.block_size > 0;
  cov.window = c.sliding_window > 0;
  cov.prefix_cache = s.prefix_cache;
  cov.small_pool = s.pool_blocks > 0;
  return cov;
}

}  // namespace kvcheck::rcgen

namespace kvcheck {
void showValue(const Scenario& scenario, std::ostream& os) {
  os << "size " << scenario.size() << "\n" << scenario.to_text();
}
}  // namespace kvcheck
