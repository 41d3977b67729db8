// The genes of a scenario and how RapidCheck draws and shrinks them
// (generators.h); decode.cpp turns them into a Scenario.
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

rc::Gen<SequenceGenes> sequence_genes(Emphasis emphasis) {
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
                                      {2, rc::gen::resize(100, between(1, 24))}})),
      // A quarter of the sequences offload once; most under the offload
      // emphasis (its faults' kill rows).
      rc::gen::set(&SequenceGenes::offload_after,
                   emphasis == Emphasis::kOffload
                       ? weighted_gen<int>({{1, rc::gen::just(0)}, {3, between(1, kMaxDecode)}})
                       : weighted_gen<int>({{3, rc::gen::just(0)}, {1, between(1, kMaxDecode)}})));
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
  // Parameters over their whole domain: each operation reduces them modulo
  // what its sequence holds (Operation::draw), so any value is valid.
  const rc::Gen<OperationGenes> genes = rc::gen::build<OperationGenes>(
      rc::gen::set(&OperationGenes::target, between(0, kMaxSequences - 1)),
      rc::gen::set(&OperationGenes::a, rc::gen::resize(100, between(0, kMaxPrompt + kMaxDecode))),
      rc::gen::set(&OperationGenes::b, rc::gen::resize(100, between(0, kMaxPrompt + kMaxDecode))),
      rc::gen::set(&OperationGenes::c, rc::gen::resize(100, between(0, 2 * kMaxPrompt))),
      rc::gen::set(&OperationGenes::variant, rc::gen::resize(100, between(0, 11))));
  return rc::gen::build<OpGenes>(
      // Saves and restores a step apart: a restore must follow a change.
      rc::gen::set(&OpGenes::steps_after,
                   shift ? between(0, 2)
                   : emphasis == Emphasis::kSaveRestore
                       ? between(1, 2)
                       : weighted_gen<int>(
                             {{4, rc::gen::just(0)}, {2, between(1, 3)}, {1, between(0, 12)}})),
      rc::gen::set(&OpGenes::which, rc::gen::resize(100, between(0, 1 << 16))),
      rc::gen::set(&OpGenes::genes, genes), rc::gen::set(&OpGenes::child_tokens, between(0, 8)),
      rc::gen::set(&OpGenes::child_finishes, rarely_true(2, 1)));
}

rc::Gen<int> block_size_gene(Emphasis emphasis) {
  if (emphasis == Emphasis::kContextShift || emphasis == Emphasis::kSaveRestore) {
    return rc::gen::just(0);
  }
  if (emphasis == Emphasis::kPrefixCache) return between(1, 32);
  // Offload moves blocks: always paged, small blocks (several per sequence) often.
  if (emphasis == Emphasis::kOffload) {
    return weighted_gen<int>({{2, between(1, 4)}, {1, between(1, 32)}});
  }
  // Forks share blocks (copy-on-write, reference counts) only when paged;
  // small blocks put a fork's cut mid-block more often.
  if (emphasis == Emphasis::kForks) {
    return weighted_gen<int>({{1, rc::gen::just(0)}, {2, between(1, 4)}, {2, between(1, 32)}});
  }
  // Contiguous first (the shrink target), then the edges 1 and 16, any B.
  return weighted_gen<int>(
      {{2, rc::gen::just(0)}, {1, rc::gen::just(1)}, {1, rc::gen::just(16)}, {2, between(1, 32)}});
}

rc::Gen<int> window_gene(Emphasis emphasis) {
  if (emphasis == Emphasis::kContextShift || emphasis == Emphasis::kSaveRestore) {
    return rc::gen::just(0);
  }
  // No window (the shrink target) a third of the time; else W small against
  // the prompts (rings that wrap, chunks across the edge) or as long.
  return weighted_gen<int>({{1, rc::gen::just(0)},
                            {2, between(1, 4)},
                            {1, between(1, 16)},
                            {1, between(1, kMaxPrompt)}});
}

rc::Gen<int> cell_operations_gene(Emphasis emphasis) {
  switch (emphasis) {
    case Emphasis::kContextShift:
      return between(1, 2);
    case Emphasis::kPrefixCache:
    case Emphasis::kOffload:
      return rc::gen::just(0);
    default:
      return weighted_choice<int>({{4, 0}, {1, 1}, {3, 2}});
  }
}

rc::Gen<std::vector<OpGenes>> ops_gene(Emphasis emphasis) {
  const bool focused = emphasis == Emphasis::kContextShift || emphasis == Emphasis::kForks ||
                       emphasis == Emphasis::kTruncations || emphasis == Emphasis::kOffload ||
                       emphasis == Emphasis::kSaveRestore;
  return vector_of<OpGenes>(focused ? weighted_choice<int>({{2, 1}, {2, 2}, {1, 4}})
                                    : weighted_choice<int>({{1, 0}, {2, 1}, {2, 2}, {2, 4}}),
                            focused ? 1 : 0, op_genes(emphasis));
}

}  // namespace

// model_genes, the same Shrinkable `scenarios_per_model` times in a row.
// Model k is drawn from the reuse's key and k, not from the case's random,
// so it does not depend on which scenarios of the stream ran before (a turn
// of a campaign may run in another process). Drawn at a size of its own,
// uniform in [0, kModelReuseMaxSize]: at the size of the case that draws it,
// a run of scenarios that starts each turn of cases (RapidCheck's size ramps
// from 0 every hunt) draws only the smallest models.
rc::Gen<ModelGenes> reused(rc::Gen<ModelGenes> fresh, std::shared_ptr<ModelReuse> reuse) {
  return rc::Gen<ModelGenes>([fresh, reuse](const rc::Random&, int) {
    const int64_t model = reuse->next_scenario++ / reuse->scenarios_per_model;
    if (!reuse->current || reuse->current_model != model) {
      rc::Random genes(rc::Random::Key{reuse->key, uint64_t(model), 0x6b76636865636bull, 0});
      rc::Random sizing = genes.split();
      reuse->current = fresh(genes, int(sizing.next() % (kModelReuseMaxSize + 1)));
      reuse->current_model = model;
    }
    return *reuse->current;
  });
}

rc::Gen<ScenarioGenes> scenario_genes(Emphasis emphasis, std::shared_ptr<ModelReuse> reuse) {
  const bool reusing = reuse != nullptr && reuse->scenarios_per_model > 1;
  const rc::Gen<int> sequence_count =
      emphasis == Emphasis::kPrefixCache || emphasis == Emphasis::kSeveralSequences
          ? weighted_choice<int>({{4, 2}, {2, 3}, {1, 4}, {1, 5}, {1, 6}})
          : weighted_choice<int>({{4, 1}, {4, 2}, {2, 3}, {1, 4}, {1, 5}, {1, 6}});
  // 0 (all running sequences in one step) is the shrink target and the most
  // common: ragged batches are what the properties compare against solo runs.
  const rc::Gen<int> step_mask =
      weighted_gen<int>({{4, rc::gen::just(0)}, {3, rc::gen::inRange(1, 1 << kMaxSequences)}});
  return rc::gen::build<ScenarioGenes>(
      rc::gen::set(&ScenarioGenes::model,
                   reusing ? reused(model_genes(emphasis), reuse) : model_genes(emphasis)),
      rc::gen::set(&ScenarioGenes::sequences,
                   vector_of(sequence_count, 1, sequence_genes(emphasis))),
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
      // Each reduced dtype in a sixth of the cases: they round differently.
      rc::gen::set(
          &ScenarioGenes::kv_dtype,
          weighted_choice<KvDtype>(
              {{3, KvDtype::kF32}, {1, KvDtype::kBF16}, {1, KvDtype::kF16}, {1, KvDtype::kQ8_0}})),
      rc::gen::set(&ScenarioGenes::token_seed, rc::gen::inRange<uint64_t>(0, 1000)),
      rc::gen::set(&ScenarioGenes::ops, ops_gene(emphasis)),
      rc::gen::set(&ScenarioGenes::block_size, block_size_gene(emphasis)),
      rc::gen::set(&ScenarioGenes::prefix_cache,
                   emphasis == Emphasis::kPrefixCache ? rc::gen::just(true) : rarely_true(1, 2)),
      rc::gen::set(
          &ScenarioGenes::pool_slack,
          weighted_gen<int>({{3, rc::gen::just(-1)}, {1, rc::gen::just(0)}, {3, between(1, 6)}})),
      rc::gen::set(&ScenarioGenes::sliding_window, window_gene(emphasis)),
      rc::gen::set(&ScenarioGenes::window_pattern,
                   weighted_gen<int>({{3, rc::gen::just(0)}, {1, between(2, 3)}})),
      rc::gen::set(&ScenarioGenes::cell_operations, cell_operations_gene(emphasis)),
      rc::gen::set(&ScenarioGenes::cache_keys,
                   weighted_gen<int>({{2, rc::gen::just(0)}, {3, between(1, 3)}})),
      rc::gen::set(&ScenarioGenes::emphasis, rc::gen::just(emphasis)),
      rc::gen::set(&ScenarioGenes::model_max_pos, rc::gen::just(reusing)));
}

}  // namespace kvcheck::rcgen
