// P6 cache_state: after every call, every running sequence's cached K/V in
// every layer equals the K/V the oracle recomputes, within the bound; the
// cache holds as many positions (or cells) as were fed, and the positions
// it reports are the reference's. The most localizing property: a failure
// names the call, sequence, layer, KV head and slot range.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "properties/common/cache_compare.h"
#include "properties/common/context.h"
#include "properties/common/reference.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// One layer of one running sequence after one call: what P6 compares.
struct LayerView {
  const Config& config;
  int call;
  int sequence;
  int layer;
  int length;  // positions (or cells) the sequence holds
  const SequenceReference& reference;
  const CacheSnapshot& snap;
  // A replayed history (erase, shift) is a list of cells, slot i the
  // reference's cell i; else slot i holds position i, or the position a
  // window's ring lists.
  bool cells() const { return !reference.positions.empty(); }
  Location where() const {
    Location where;
    where.call = call;
    where.sequence = sequence;
    where.layer = layer;
    return where;
  }
  std::string prefix() const {
    return "after call " + std::to_string(call) + ", s" + std::to_string(sequence);
  }
};

// Per sequence and segment, the oracle of what it held then; a segment
// with no tokens keeps the empty reference.
std::vector<std::vector<std::shared_ptr<const SequenceReference>>> held_references(
    const Context& context) {
  const size_t n = context.scenario.sequences.size();
  const auto empty = std::make_shared<const SequenceReference>();
  std::vector<std::vector<std::shared_ptr<const SequenceReference>>> references(n);  // [s][segment]
  for (size_t s = 0; s < n; ++s) {
    for (const Segment& segment : context.plan.segments[s]) {
      references[s].push_back(segment.tokens.empty() && segment.history.empty()
                                  ? empty
                                  : reference_for(context, segment));
    }
  }
  return references;
}

// The snapshot holds what the layer must (its length or coverage) in the
// config's shape; fails the verdict otherwise.
bool shape_holds(Verdict& verdict, const LayerView& view) {
  const CacheSnapshot& snap = view.snap;
  const int KVH = view.config.n_kv_heads, D = view.config.head_dim, length = view.length;
  const std::string coverage =
      view.cells() ? (snap.length == length ? std::string()
                                            : "the cache holds " + std::to_string(snap.length) +
                                                  " cells, " + std::to_string(length) + " are held")
                   : snapshot_coverage_error(snap, view.config, view.layer, length);
  if (coverage.empty() && snap.n_kv_heads == KVH && snap.head_dim == D) return true;
  Location where = view.where();
  where.position = std::min(snap.length, length);
  fail(verdict, where,
       view.prefix() + " layer " + std::to_string(view.layer) + ": " +
           (coverage.empty() ? std::string("the snapshot's shape is wrong") : coverage),
       "snapshot: length " + std::to_string(snap.length) + ", kv heads " +
           std::to_string(snap.n_kv_heads) + ", head_dim " + std::to_string(snap.head_dim) +
           "; expected " + std::to_string(length) + ", " + std::to_string(KVH) + ", " +
           std::to_string(D) + "\n");
  return false;
}

// An engine that reports the positions its cells hold (erase, shift) must
// report the reference's; fails the verdict otherwise.
bool positions_hold(Verdict& verdict, const LayerView& view) {
  const std::vector<int32_t>& mine = view.snap.positions;
  const std::vector<int32_t>& theirs = view.reference.positions;
  if (theirs.empty() || mine.empty() || mine == theirs) return true;
  size_t at = 0;
  while (at < mine.size() && at < theirs.size() && mine[at] == theirs[at]) ++at;
  Location where = view.where();
  where.position = static_cast<int>(at);
  fail(verdict, where,
       view.prefix() + " cell " + std::to_string(at) + ": the cache reports the wrong position",
       "the engine's snapshot positions differ from the replay's from cell " + std::to_string(at) +
           "\n");
  return false;
}

// The sum of |V| differences of every KV head between snapshot slot i and
// reference cell r of the layer (the reference's T cells).
double v_distance(const LayerView& view, int i, int r) {
  const int KVH = view.config.n_kv_heads, D = view.config.head_dim;
  const size_t T = size_t(view.reference.oracle.n_tokens);
  double sum = 0;
  for (int g = 0; g < KVH; ++g) {
    const size_t base =
        ((size_t(view.layer) * T + size_t(r)) * size_t(KVH) + size_t(g)) * size_t(D);
    for (int d = 0; d < D; ++d) {
      sum += std::abs(double(view.snap.v_at(i, g, d)) - view.reference.oracle.v[base + size_t(d)]);
    }
  }
  return std::isfinite(sum) ? sum : INFINITY;
}

// The reference cell each snapshot slot is compared with: slot i with cell
// i, except among cells that share a position (after a div), which no call
// tells apart and attention sees as a set (docs/OPERATIONS.md, "Div"): the
// engine may list them in any order, so each of such a group's slots, in
// order, takes the group's unpaired cell whose V it holds most closely (V
// never rotates). A cell with a K or V of another is still wrong.
std::vector<int> reference_cells(const LayerView& view) {
  const std::vector<int32_t>& positions = view.reference.positions;
  const int n = std::min(view.snap.length, int(positions.size()));
  std::vector<int> cell(size_t(std::max(view.snap.length, 0)));
  std::iota(cell.begin(), cell.end(), 0);
  std::vector<int32_t> sorted(positions.begin(), positions.begin() + n);
  std::sort(sorted.begin(), sorted.end());
  if (!view.cells() || std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end())
    return cell;
  std::vector<bool> paired(size_t(n), false);
  for (int i = 0; i < n; ++i) {
    int best = -1;
    double best_distance = INFINITY;
    for (int r = 0; r < n; ++r) {
      if (paired[size_t(r)] || positions[size_t(r)] != positions[size_t(i)]) continue;
      const double distance = v_distance(view, i, r);
      if (best < 0 || distance < best_distance) best = r, best_distance = distance;
    }
    cell[size_t(i)] = best;
    paired[size_t(best)] = true;
  }
  return cell;
}

// The wrong elements of one layer: the first (its head, dim, K or V and
// what was compared) and the last position holding one.
struct WrongElements {
  int first_bad = -1, last_bad = -1, head = -1, dim = -1, kind = 0;
  ElementCheck bad;
};

// Compares every element of the layer's slots with the reference, keeping
// the worst ratio of the right ones in `worst_ratio`.
WrongElements scan_elements(const LayerView& view, double& worst_ratio) {
  const CacheSnapshot& snap = view.snap;
  const int KVH = view.config.n_kv_heads, D = view.config.head_dim;
  const int T = view.reference.oracle.n_tokens;
  WrongElements wrong;
  const std::vector<int> cell = reference_cells(view);
  // Slot i holds reference entry pos: its cell (no positions listed: i
  // itself; a replayed history's cells: reference_cells), or the ring's
  // listed positions[i].
  for (int i = 0; i < snap.length; ++i) {
    const int pos =
        view.cells() || snap.positions.empty() ? cell[size_t(i)] : snap.positions[size_t(i)];
    if (pos >= T) break;
    for (int g = 0; g < KVH; ++g) {
      const size_t base =
          ((size_t(view.layer) * size_t(T) + size_t(pos)) * size_t(KVH) + size_t(g)) * size_t(D);
      for (int d = 0; d < D; ++d) {
        for (int kind = 0; kind < 2; ++kind) {
          const ElementCheck c = check_element(snap, view.reference, kind, base, i, g, d);
          if (std::isfinite(c.cached) && c.ratio <= 1.0) {
            worst_ratio = std::max(worst_ratio, c.ratio);
            continue;
          }
          if (wrong.first_bad < 0) {
            wrong.first_bad = pos, wrong.head = g, wrong.dim = d, wrong.kind = kind;
            wrong.bad = c;
          }
          wrong.last_bad = pos;
        }
      }
    }
  }
  return wrong;
}

void fail_wrong_elements(Verdict& verdict, const LayerView& view, const WrongElements& wrong,
                         const std::string& table) {
  const ElementCheck& bad = wrong.bad;
  Location where = view.where();
  where.kv_head = wrong.head;
  where.position = wrong.first_bad;
  where.first_bad_position = wrong.first_bad;
  where.last_bad_position = wrong.last_bad;
  std::ostringstream detail;
  detail << "after call " << view.call << ", sequence s" << view.sequence << " with " << view.length
         << " positions cached\n"
         << "first wrong element: layer " << view.layer << " kv head " << wrong.head << " position "
         << wrong.first_bad << " dim " << wrong.dim << " " << (wrong.kind == 0 ? "K" : "V")
         << ": cached " << format_double(bad.cached) << " oracle " << format_double(bad.exact)
         << " bound " << format_double(bad.bound)
         << (std::isfinite(bad.cached) ? "" : " (non-finite: a poisoned slot was read)");
  if (!std::isnan(bad.scale_exact)) {
    detail << "\nits q8_0 block scale: stored " << format_double(bad.scale)
           << ", the exact block's amax / 127 " << format_double(bad.scale_exact);
  }
  detail << "\nwrong positions in layer " << view.layer << ": " << wrong.first_bad << ".."
         << wrong.last_bad << "\n"
         << table;
  fail(verdict, where,
       view.prefix() + " layer " + std::to_string(view.layer) + " kv head " +
           std::to_string(wrong.head) + ": cached " + (wrong.kind == 0 ? "K" : "V") +
           " wrong at positions " + std::to_string(wrong.first_bad) + ".." +
           std::to_string(wrong.last_bad),
       detail.str());
  verdict.worst_ratio = std::isfinite(bad.cached) ? bad.ratio : INFINITY;
}

// Every layer of one running sequence after `call`; false once one fails.
bool sequence_holds(Verdict& verdict, const Context& context, const ScenarioRunner& runner,
                    int call, int sequence, const SequenceReference& reference,
                    double& worst_ratio) {
  const Config& config = context.scenario.config;
  for (int l = 0; l < config.n_layers; ++l) {
    CacheSnapshot snap;
    const LayerView view{config, call, sequence, l, runner.held(sequence), reference, snap};
    try {
      snap = runner.engine().cache(runner.id(sequence), l);
    } catch (const EngineInconsistency& e) {
      // Its length and its K/V disagree: the engine's cache, at this place.
      fail(verdict, view.where(),
           view.prefix() + " layer " + std::to_string(l) + ": the cache disagrees with itself",
           std::string(e.what()) + "\n");
      return false;
    }
    if (!shape_holds(verdict, view) || !positions_hold(verdict, view)) return false;
    const WrongElements wrong = scan_elements(view, worst_ratio);
    if (wrong.first_bad < 0) continue;
    fail_wrong_elements(
        verdict, view, wrong,
        cache_table(runner.engine(), runner.id(sequence), reference, config, view.length));
    return false;
  }
  return true;
}

}  // namespace

Verdict check_cache_state(const Context& context) {
  Verdict verdict = start_verdict(Property::kCacheState);
  bool any_step = false;
  for (const Call& call : context.scenario.calls) any_step |= call.kind == Call::Kind::kStep;
  if (!any_step) return not_applicable(Property::kCacheState, "no step");

  const auto references = held_references(context);
  double worst_ratio = 0;
  bool failed = false;
  const CallHook hook = [&](int call, const ScenarioRunner& runner) {
    for (size_t s = 0; s < references.size(); ++s) {
      const int sequence = static_cast<int>(s);
      if (!runner.running(sequence)) continue;
      const SequenceReference& reference =
          *references[s][size_t(context.plan.segment_at(sequence, call))];
      if (!sequence_holds(verdict, context, runner, call, sequence, reference, worst_ratio)) {
        failed = true;
        return false;
      }
    }
    return true;
  };
  ScenarioRunner runner(context.scenario, context.scenario.config, context.weights,
                        context.factory);
  const RunResult run = runner.run(hook);
  if (failed) return verdict;
  if (run.engine_failed) return engine_refused(Property::kCacheState, run, "the scenario");
  verdict.worst_ratio = worst_ratio;
  pass(verdict, "worst error/bound " + format_double(worst_ratio));
  return verdict;
}

}  // namespace kvcheck::checks
