// The snapshot comparisons of P6 (cache_compare.h says why they are apart).
#include "properties/common/cache_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <utility>
#include <vector>

#include "properties/tolerance.h"

namespace kvcheck::checks {

ElementCheck check_element(const CacheSnapshot& snap, const SequenceReference& reference, int kind,
                           size_t base, int pos, int g, int d) {
  const std::vector<double>& exact = kind == 0 ? reference.oracle.k : reference.oracle.v;
  ElementCheck c;
  c.cached = kind == 0 ? snap.k_at(pos, g, d) : snap.v_at(pos, g, d);
  c.exact = exact[base + size_t(d)];
  const std::vector<double>& computed =
      kind == 0 ? reference.bounds.k_computed : reference.bounds.v_computed;
  // A stored scale is checked where the bound models this one's q8_0 (a V
  // declared in a type of its own has no pre-storage bound: its bound is
  // its own type's).
  const bool scaled = snap.dtype == KvDtype::kQ8_0 && !snap.k_scales.empty() && !computed.empty();
  if (!scaled) {
    c.bound = (kind == 0 ? reference.bounds.k : reference.bounds.v)[base + size_t(d)];
    c.ratio = std::abs(c.cached - c.exact) / c.bound;
    return c;
  }
  const int block = d / int(kQ8Block), first = block * int(kQ8Block);
  const int end = std::min(snap.head_dim, first + int(kQ8Block));
  c.scale = kind == 0 ? snap.k_scale(pos, g, block) : snap.v_scale(pos, g, block);
  double amax = 0, computed_max = 0;
  for (int i = first; i < end; ++i) {
    amax = std::max(amax, std::abs(exact[base + size_t(i)]));
    computed_max = std::max(computed_max, computed[base + size_t(i)]);
  }
  c.scale_exact = amax / 127;
  const KvQuantizer quantizer = reference.bounds.quantizer;
  c.bound = q8_element_bound(computed[base + size_t(d)], c.scale, quantizer);
  c.ratio = std::max(
      std::abs(c.cached - c.exact) / c.bound,
      std::abs(c.scale - c.scale_exact) / q8_scale_bound(computed_max, c.scale, quantizer));
  if (std::isnan(c.scale)) c.ratio = INFINITY;
  return c;
}

int snapshot_index(const CacheSnapshot& snap, int pos) {
  if (snap.positions.empty()) return pos < snap.length ? pos : -1;
  if (pos < snap.positions.front()) return -1;
  const int i = pos - snap.positions.front();
  return i < snap.length && snap.positions[size_t(i)] == pos ? i : -1;
}

std::string snapshot_coverage_error(const CacheSnapshot& snap, const Config& config, int layer,
                                    int held) {
  if (snap.positions.empty()) {
    if (snap.length == held) return "";
    return "the cache holds " + std::to_string(snap.length) + " positions, " +
           std::to_string(held) + " tokens were fed";
  }
  const int need = config.windowed(layer) ? std::min(held, config.sliding_window) : held;
  if (snap.positions.size() != size_t(snap.length) || snap.length < need ||
      snap.positions.back() != held - 1 || snap.positions.front() != held - snap.length) {
    return "the cache lists positions " +
           (snap.positions.empty() ? std::string("none")
                                   : std::to_string(snap.positions.front()) + ".." +
                                         std::to_string(snap.positions.back())) +
           " in " + std::to_string(snap.length) + " slots; after " + std::to_string(held) +
           " tokens it must hold positions " + std::to_string(held - need) + ".." +
           std::to_string(held - 1) + " at least";
  }
  for (int i = 1; i < snap.length; ++i) {
    if (snap.positions[size_t(i)] != snap.positions[size_t(i - 1)] + 1) {
      return "the cache lists positions out of order at slot " + std::to_string(i);
    }
  }
  return "";
}

std::string cache_table(const Engine& engine, SequenceId id, const SequenceReference& reference,
                        const Config& config, int length) {
  const int KVH = config.n_kv_heads, D = config.head_dim, T = reference.oracle.n_tokens;
  const int ranges = std::min(length, 8);
  std::ostringstream out;
  out << "largest |cached - oracle| (error/bound) per layer and position range; ! = wrong\n";
  out << "  layer";
  std::vector<std::pair<int, int>> spans;  // [range] first, last position
  for (int r = 0; r < ranges; ++r) {
    const int first = r * length / ranges, last = (r + 1) * length / ranges - 1;
    spans.push_back({first, last});
    out << " | pos " << first << ".." << last << " K, V";
  }
  out << "\n";
  for (int l = 0; l < config.n_layers; ++l) {
    const CacheSnapshot snap = engine.cache(id, l);
    out << "  " << l << "    ";
    for (const auto& [first, last] : spans) {
      for (int kind = 0; kind < 2; ++kind) {
        double worst_error = 0, worst_ratio = 0;
        bool bad = false;
        for (int pos = first; pos <= last && pos < T; ++pos) {
          const int index = snapshot_index(snap, pos);
          if (index < 0) continue;
          for (int g = 0; g < KVH; ++g) {
            for (int d = 0; d < D; ++d) {
              const size_t base =
                  ((size_t(l) * size_t(T) + size_t(pos)) * size_t(KVH) + size_t(g)) * size_t(D);
              const ElementCheck c = check_element(snap, reference, kind, base, index, g, d);
              const double error = std::abs(c.cached - c.exact);
              if (!std::isfinite(c.cached)) {
                bad = true;
                worst_error = INFINITY;
                worst_ratio = INFINITY;
                continue;
              }
              if (!(c.ratio <= 1.0)) bad = true;
              worst_error = std::max(worst_error, error);
              worst_ratio = std::max(worst_ratio, c.ratio);
            }
          }
        }
        char cell[48];
        std::snprintf(cell, sizeof(cell), "%s %.2e (%.2g)%s", kind == 0 ? " |" : ",", worst_error,
                      worst_ratio, bad ? "!" : "");
        out << cell;
      }
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace kvcheck::checks
