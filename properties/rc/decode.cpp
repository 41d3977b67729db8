// decode(): genes -> a Scenario that validates and that the engine can run
// (generators.h). The schedule is built call by call on the harness's own
// model (properties/schedule/), and the cache operations are drawn through
// the operation table, so the generators reach what each operation
// declares and nothing validate() would refuse.
#include <algorithm>
#include <numeric>

#include "properties/rc/generators.h"

namespace kvcheck::rcgen {

namespace {

// splitmix64: the portable mixer tokens are drawn from, so a scenario's
// tokens are the same bits on every platform.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<int32_t> draw_tokens(uint64_t token_seed, size_t sequence, int count, int vocab) {
  std::vector<int32_t> tokens(static_cast<size_t>(count));  // [token]
  for (int t = 0; t < count; ++t) {
    tokens[size_t(t)] =
        int32_t(mix(mix(token_seed * 64 + sequence) + uint64_t(t)) % uint64_t(vocab));
  }
  return tokens;
}

// Positions a generated schedule may move cells to before the final
// max_pos is known (shifts up open room above the cells).
constexpr int kPositionBudget = kMaxPrompt + kMaxDecode + 16;

// One sequence's feeding plan: its chunks in order, then what follows.
struct Plan {
  std::vector<int> chunks;  // prompt chunks, then one 1-token chunk per decode token
  bool finishes = false;
  int start_delay = 0;
  int epoch = 0;  // resets before it
  bool reset_before = false;
  size_t offload_after = 0;  // offloaded after the step that feeds chunk number this (0: never)
  size_t next = 0;           // next chunk to feed
  bool has_tokens_left() const { return next < chunks.size(); }
  int tokens_left() const {
    return std::accumulate(chunks.begin() + std::ptrdiff_t(next), chunks.end(), 0);
  }
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
  if (g.offload_after > 0)
    plan.offload_after = size_t(g.offload_after - 1) % plan.chunks.size() + 1;
  return plan;
}

// The smallest multiple of `multiple` (and of 2: RoPE pairs) at or above
// `value`, kept inside [lo, hi] (validated traits leave one there).
int fit_dimension(int value, int lo, int hi, int multiple) {
  const int step = std::lcm(2, multiple);
  int v = std::max(value, lo);
  v = (v + step - 1) / step * step;
  while (v > hi && v - step >= 1) v -= step;
  return v;
}

// The head size an engine asks for (limits.head_dims) that a model takes,
// or 0: odd weight seeds take one of those inside the limits, by the seed
// rather than a gene of their own, so that an engine that asks for none
// draws what it drew before, shrinking the seed (toward 0) leaves the small
// heads, and the scenarios that share a model's genes (ModelReuse) share
// its head size too. (A multiple of 2 as well: RoPE pairs, as fit_dimension.)
int asked_head_dim(const ShapeLimits& limits, uint64_t weight_seed) {
  std::vector<int> inside;
  const int step = std::lcm(2, limits.head_dim_multiple);
  for (const int d : limits.head_dims) {
    if (d >= limits.min_head_dim && d <= limits.max_head_dim && d % step == 0) inside.push_back(d);
  }
  if (inside.empty() || weight_seed % 2 == 0) return 0;
  return inside[size_t(weight_seed / 2 % inside.size())];
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
  // Outside the d_model limits it stays refused (not applicable). With
  // mha_only the group genes draw the head count.
  apply_shape_rules(c, limits);
}

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

// Would the engine take erase or shift in scenarios of this model at all?
bool draws_cell_operations(const ScenarioGenes& genes, const EngineTraits& traits) {
  return genes.cell_operations > 0 && (traits.operations.erase || traits.operations.shift) &&
         accepts_family(traits.limits, Family::kLlama);
}

void decode_model(const ScenarioGenes& genes, const EngineTraits& traits,
                  const std::shared_ptr<const Checkpoint>& model, Scenario& s) {
  const ModelGenes& m = genes.model;
  Config& c = s.config;
  c.family = draws_cell_operations(genes, traits) ? Family::kLlama : m.family;
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
  if (const int asked = asked_head_dim(traits.limits, m.weight_seed); asked > 0) c.head_dim = asked;
  fit_model(c, s.kv_dtype, traits.limits);
  c.qkv_bias = c.family == Family::kGpt2 && m.qkv_bias;
  s.weight_seed = m.weight_seed;
  if (model) {
    // The engine takes the checkpoint or declares it cannot (traits_exclude).
    c = model->config;
    s.model = model;
    s.weight_seed = 0;
  }
}

// Each sequence's feeding plan. Without finish or reset no row is ever
// freed, so at most max_rows sequences in all; with them, rows still bound
// each epoch (kept simple: the same cap).
std::vector<Plan> decode_plans(const ScenarioGenes& genes, const EngineTraits& traits) {
  const OperationTraits& ops = traits.operations;
  const ShapeLimits& limits = traits.limits;
  const size_t max_sequences = size_t(std::min(kMaxSequences, limits.max_rows));
  std::vector<Plan> plans;
  for (const SequenceGenes& g : genes.sequences) {
    if (plans.size() == max_sequences) break;
    SequenceGenes fitted = g;
    // Erase and shift scenarios go on feeding after the operations, where
    // a cell's index and its position can differ,
    // and hold a few cells by then, so that a range can lie in the middle.
    if (draws_cell_operations(genes, traits) && genes.cell_operations == 2) {
      fitted.prompt_length = std::max(g.prompt_length, 4);
      fitted.decode_length = std::max(g.decode_length, 2);
    }
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
  return plans;
}

// Paged storage, a window and a prefix cache only where the engine declares
// them. A window on contiguous storage only: no engine combines it with
// paged storage, fork or truncate (traits_exclude), so a windowed scenario
// draws no fork or truncation, and paged scenarios (the prefix cache's
// faults live there) keep theirs. Scenarios for erase and shift keep
// contiguous storage and no window (cell_operation_scope).
void decode_storage(const ScenarioGenes& genes, const EngineTraits& traits, bool has_model,
                    Scenario& s) {
  const OperationTraits& ops = traits.operations;
  Config& c = s.config;
  const bool cells = draws_cell_operations(genes, traits) && !has_model;
  s.block_size = ops.paged && !cells ? std::clamp(genes.block_size, 0, 32) : 0;
  if (ops.sliding_window && !has_model && s.block_size == 0 && !cells) {
    c.sliding_window = std::clamp(genes.sliding_window, 0, kMaxPrompt + kMaxDecode);
    if (c.sliding_window > 0) {
      c.sliding_window_pattern = std::clamp(genes.window_pattern, 0, kMaxLayers);
    }
  }
  s.prefix_cache = s.block_size > 0 && ops.prefix_cache && genes.prefix_cache;
  // A hit needs a prompt longer than a block: prefix scenarios keep B in 1..4.
  if (s.prefix_cache) s.block_size = 1 + (s.block_size - 1) % 4;
  // Half the prefix scenarios of an engine that computes a hit's prompt
  // rows ask for them (a bit of the token seed: no gene of its own).
  s.prompt_logits = s.prefix_cache && ops.prompt_logits && ((genes.token_seed >> 5) & 1) != 0;
}

// The tokens of each planned sequence; a prompt may start like the one
// before it (alive or finished by then): what a prefix cache reuses.
void decode_tokens(const ScenarioGenes& genes, std::vector<Plan>& plans, Scenario& s) {
  for (size_t i = 0; i < plans.size(); ++i) {
    const int total = std::accumulate(plans[i].chunks.begin(), plans[i].chunks.end(), 0);
    std::vector<int32_t> tokens = draw_tokens(genes.token_seed, i, total, s.config.vocab);
    if (s.prefix_cache && i > 0) {
      const std::vector<int32_t>& before = s.sequences.back();
      const size_t shared = std::min(
          {size_t(std::max(0, genes.sequences[i].shared_prefix)), before.size(), tokens.size()});
      std::copy_n(before.begin(), shared, tokens.begin());
    }
    s.sequences.push_back(std::move(tokens));
    plans[i].epoch = (i == 0 ? 0 : plans[i - 1].epoch) + (plans[i].reset_before ? 1 : 0);
  }
}

// Cache keys (ScenarioGenes::cache_keys) for the started sequences.
void decode_cache_keys(const ScenarioGenes& genes, const EngineTraits& traits, Scenario& s) {
  if (!s.prefix_cache || !traits.operations.cache_keys || genes.cache_keys <= 0) return;
  const int gene = std::min(genes.cache_keys, 3);
  for (size_t i = 0; i < s.sequences.size(); ++i) {
    s.cache_keys.push_back(gene == 3 ? 2u : uint32_t(1 + ((gene >> (i % 2)) & 1)));
  }
}

// How much the emphasis favours an operation (a factor on its weight).
int emphasis_factor(Emphasis emphasis, Call::Kind kind) {
  const bool cells = kind == Call::Kind::kErase || kind == Call::Kind::kShift;
  if (emphasis == Emphasis::kContextShift) return cells ? 1 : 0;
  // Forks favour verify too: a rollback in a sequence whose blocks a fork
  // shares is where copy-on-write and reference counts meet speculation.
  if (emphasis == Emphasis::kForks) {
    return kind == Call::Kind::kFork ? 8 : kind == Call::Kind::kVerify ? 4 : 1;
  }
  // An aborted prefill's whole blocks stay cached: a later prompt that hits
  // them is where SGLang #38319 read freed pages.
  if (emphasis == Emphasis::kPrefixCache) return kind == Call::Kind::kAbort ? 6 : 1;
  // A restore is a rollback to its save: P12 checks it too.
  if (emphasis == Emphasis::kTruncations) {
    if (kind == Call::Kind::kSave || kind == Call::Kind::kRestore) return 4;
    return kind == Call::Kind::kTruncate || kind == Call::Kind::kVerify ? 8 : 1;
  }
  if (emphasis == Emphasis::kSaveRestore) {
    return kind == Call::Kind::kSave || kind == Call::Kind::kRestore ? 8 : 1;
  }
  return 1;
}

// Builds the schedule: epochs are separated by resets; inside one,
// sequences start by their delay (counted in steps of the epoch), each step
// feeds the next chunk of the running sequences its mask selects, a
// sequence that finishes does so right after its last chunk, and the
// operation genes due after a step draw their calls. Every call is applied
// to the harness's model as it is appended.
class ScheduleBuilder {
 public:
  ScheduleBuilder(const ScenarioGenes& genes, const EngineTraits& traits, std::vector<Plan>& plans,
                  Scenario& s)
      : genes_(genes), traits_(traits), plans_(plans), s_(s), model_(s) {
    for (const Operation& op : operations()) {
      const int weight = op.weight * emphasis_factor(genes.emphasis, op.kind);
      if (!op.draw || weight == 0) continue;
      Call probe;
      probe.kind = op.kind;
      if (op.needs && !op.needs(traits, s, probe).empty()) continue;
      if (op.scope && !op.scope(s).empty()) continue;
      drawable_.push_back({&op, weight});
      total_weight_ += weight;
    }
    const Operation& offload = operation(Call::Kind::kOffload);
    const Call probe = Call::offload(0);
    offloads_ = offload.needs(traits, s, probe).empty() && offload.scope(s).empty();
  }

  void build() {
    for (int epoch = 0; epoch <= plans_.back().epoch; ++epoch) run_epoch(epoch);
  }

  int running_peak = 0;  // most sequences running at once
  int max_content = 0;   // most cells a sequence held at once
  int max_position = 0;  // the largest next position any sequence reached

 private:
  void append(Call call) {
    operation(call.kind).apply(model_, call);
    s_.calls.push_back(std::move(call));
    running_peak = std::max(running_peak, model_.running);
    for (const SequenceModel& seq : model_.sequences) {
      max_content = std::max(max_content, seq.held());
      max_position = std::max(max_position, seq.next_position());
    }
  }

  void run_epoch(int epoch) {
    std::vector<int> pending;
    for (size_t i = 0; i < plans_.size(); ++i) {
      if (plans_[i].epoch == epoch) pending.push_back(int(i));
    }
    if (epoch > 0) append(Call::reset());
    std::stable_sort(pending.begin(), pending.end(), [&](int a, int b) {
      return plans_[size_t(a)].start_delay < plans_[size_t(b)].start_delay;
    });
    size_t next_pending = 0;
    const auto start_next = [&] { append(Call::start(pending[next_pending++])); };
    for (int steps = 0;; ++steps) {
      while (next_pending < pending.size() &&
             plans_[size_t(pending[next_pending])].start_delay <= steps) {
        start_next();
      }
      std::vector<int> feedable = feedable_sequences();
      if (feedable.empty()) {
        if (next_pending == pending.size()) break;
        start_next();  // nothing to feed until then, so it starts early
        feedable = feedable_sequences();
      }
      step(feedable);
      apply_ops();
      ++steps_so_far_;
    }
  }

  std::vector<int> running_sequences() const {
    std::vector<int> out;
    for (size_t i = 0; i < model_.sequences.size(); ++i) {
      if (model_.sequences[i].running()) out.push_back(int(i));
    }
    return out;
  }

  std::vector<int> feedable_sequences() const {
    std::vector<int> out;
    for (int i : running_sequences()) {
      if (plans_[size_t(i)].has_tokens_left()) out.push_back(i);
    }
    return out;
  }

  void step(const std::vector<int>& feedable) {
    const int mask = next_mask_ < genes_.step_masks.size() ? genes_.step_masks[next_mask_++] : 0;
    std::vector<int> chosen;
    for (size_t k = 0; k < feedable.size(); ++k) {
      if ((mask >> k) & 1) chosen.push_back(feedable[k]);
    }
    if (chosen.empty()) chosen = feedable;
    if (!traits_.operations.multi_sequence_step) chosen.resize(1);
    std::vector<ChunkSpec> batch;
    int step_tokens = 0;
    for (size_t k = 0; k < chosen.size(); ++k) {
      Plan& p = plans_[size_t(chosen[k])];
      if (k > 0 && step_tokens + p.chunks[p.next] > traits_.limits.max_step_tokens) {
        chosen.resize(k);  // the rest wait for a later step
        break;
      }
      step_tokens += p.chunks[p.next];
      batch.push_back({chosen[k], p.chunks[p.next++]});
    }
    append(Call::step(std::move(batch)));
    for (int i : chosen) {
      const Plan& p = plans_[size_t(i)];
      if (!p.has_tokens_left() && p.finishes) {
        append(Call::finish(i));
      } else if (p.next == p.offload_after && offloads_) {
        const DrawContext context{model_, i, s_.block_size, position_limit(i)};
        if (std::optional<Call> call = operation(Call::Kind::kOffload).draw(context, {})) {
          append(std::move(*call));
        }
      }
    }
  }

  // The operations due after this step, each on a running sequence that
  // still has tokens to be fed where there is one, so that a step follows.
  void apply_ops() {
    if (drawable_.empty()) return;
    for (; next_op_ < genes_.ops.size(); ++next_op_) {
      const OpGenes& op = genes_.ops[next_op_];
      next_op_step_ += std::max(0, op.steps_after);
      if (next_op_step_ > steps_so_far_) {
        next_op_step_ -= std::max(0, op.steps_after);  // counted again after the next step
        return;
      }
      std::vector<int> targets = feedable_sequences();
      if (targets.empty()) targets = running_sequences();
      int u = std::max(0, op.which) % total_weight_;
      size_t k = 0;
      while (u >= drawable_[k].second) u -= drawable_[k++].second;
      const Operation& chosen = *drawable_[k].first;
      if (targets.empty() && chosen.kind != Call::Kind::kFlush) continue;
      const int target =
          targets.empty() ? 0 : targets[size_t(std::max(0, op.genes.target)) % targets.size()];
      const DrawContext context{model_, target, s_.block_size > 0 ? s_.block_size : 4,
                                position_limit(target)};
      std::optional<Call> call = chosen.draw(context, op.genes);
      if (!call) continue;
      if (call->kind == Call::Kind::kFork) {
        fork(*call, op);
      } else if (operation(call->kind).precondition(model_, *call).empty()) {
        append(std::move(*call));
      }
    }
  }

  // Where a shift may move cells: the budget, less the tokens the sequence
  // is still to be fed (a checkpoint's max_pos is fixed).
  int position_limit(int sequence) const {
    const int limit = s_.model ? s_.config.max_pos : kPositionBudget;
    return std::max(1, limit - plans_[size_t(sequence)].tokens_left());
  }

  // A fork makes a sequence: its plan (a chunk, then single tokens) and tokens.
  void fork(Call call, const OpGenes& op) {
    if (forks_ == 4 || model_.running >= traits_.limits.max_rows) return;
    // A fork never splits cells that share a position (after a div).
    if (!cut_keeps_shared_positions(model_.at(call.parent).cells, call.count).empty()) return;
    const int child = static_cast<int>(plans_.size());
    Plan plan;
    int tokens = std::clamp(op.child_tokens, 0, 8);
    // A checkpoint's positions end at its max_pos, a reused model's at the
    // budget its max_pos is drawn from (size_scenario): a parent shifted up
    // near it leaves its child less room.
    if (s_.model || genes_.model_max_pos) {
      const std::vector<int32_t>& cells = model_.at(call.parent).cells;
      const int next =
          cells.empty() ? 0 : *std::max_element(cells.begin(), cells.begin() + call.count) + 1;
      tokens = std::min(tokens, std::max(0, s_.config.max_pos - (call.count > 0 ? next : 0)));
    }
    if (tokens > 0) {
      plan.chunks.push_back(std::clamp(tokens / 2, 1, traits_.limits.max_step_tokens));
    }
    for (int fed = plan.chunks.empty() ? 0 : plan.chunks[0]; fed < tokens; ++fed) {
      plan.chunks.push_back(1);
    }
    plan.finishes = op.child_finishes && traits_.operations.finish;
    plan.epoch = -1;  // started by its fork, never by an epoch
    plans_.push_back(plan);
    s_.sequences.push_back(draw_tokens(genes_.token_seed, size_t(child), tokens, s_.config.vocab));
    model_.sequences.emplace_back();
    call.sequence = child;
    const int count = call.count;
    append(std::move(call));
    max_content = std::max(max_content, count + tokens);
    ++forks_;
  }

  const ScenarioGenes& genes_;
  const EngineTraits& traits_;
  std::vector<Plan>& plans_;
  Scenario& s_;
  ScheduleModel model_;
  std::vector<std::pair<const Operation*, int>> drawable_;  // [operation] with its weight
  int total_weight_ = 0;
  bool offloads_ = false;  // the sequences' offload genes apply (paged, declared)
  size_t next_mask_ = 0;
  size_t next_op_ = 0;    // the next operation gene to apply
  int next_op_step_ = 0;  // the step the last applied operation followed
  int steps_so_far_ = 0;
  int forks_ = 0;
};

// Capacity, rows, the pool and max_pos from what the schedule needs. One
// shared context must hold every sequence at once (a conservative bound:
// all of them, not only those alive together).
void size_scenario(const ScenarioGenes& genes, const EngineTraits& traits,
                   const ScheduleBuilder& schedule, Scenario& s) {
  const ShapeLimits& limits = traits.limits;
  int needed = schedule.max_content;
  if (limits.capacity_shared) {
    needed = 0;
    for (const std::vector<int32_t>& tokens : s.sequences) needed += int(tokens.size());
  }
  s.capacity = std::max(1, std::min(needed + std::clamp(genes.capacity_slack, 0, 16),
                                    std::max(needed, limits.max_capacity)));
  s.max_rows = std::max(1, schedule.running_peak) + std::clamp(genes.spare_rows, 0, 3);
  if (s.block_size > 0 && genes.pool_slack >= 0) {
    const int longest_blocks = (schedule.max_content + s.block_size - 1) / s.block_size;
    s.pool_blocks = std::max(1, longest_blocks - 1 + std::min(genes.pool_slack, 16));
  }
  if (s.model) {
    s.capacity = std::min(s.capacity, s.config.max_pos);  // fit_context kept `needed` within it
  } else if (genes.model_max_pos) {
    // The model's own, the same for every scenario on it (ModelReuse): the
    // schedule kept its positions within kPositionBudget, so its cells too.
    s.config.max_pos = kPositionBudget + std::clamp(genes.model.max_pos_slack, 0, 16);
    s.capacity = std::min(s.capacity, s.config.max_pos);
  } else {
    s.config.max_pos =
        std::max(s.capacity, schedule.max_position) + std::clamp(genes.model.max_pos_slack, 0, 16);
  }
}

}  // namespace

Scenario decode(const ScenarioGenes& genes, const EngineTraits& traits,
                const std::shared_ptr<const Checkpoint>& model) {
  Scenario s;
  decode_model(genes, traits, model, s);
  std::vector<Plan> plans = decode_plans(genes, traits);
  if (model) fit_context(plans, s.config.max_pos, traits.limits.capacity_shared);
  decode_storage(genes, traits, model != nullptr, s);
  decode_tokens(genes, plans, s);
  decode_cache_keys(genes, traits, s);
  // While the schedule is built, nothing limits it but the genes.
  if (!model) s.config.max_pos = kPositionBudget;
  s.capacity = s.config.max_pos;
  s.max_rows = 1 << 12;
  ScheduleBuilder schedule(genes, traits, plans, s);
  schedule.build();
  size_scenario(genes, traits, schedule, s);
  return s;
}

rc::Gen<Scenario> scenario(Emphasis emphasis, const EngineTraits& traits,
                           std::shared_ptr<const Checkpoint> model,
                           std::shared_ptr<ModelReuse> reuse) {
  return rc::gen::map(scenario_genes(emphasis, std::move(reuse)),
                      [traits, model](const ScenarioGenes& g) { return decode(g, traits, model); });
}

}  // namespace kvcheck::rcgen
