// P13 pool: after every call, the paged pool's accounting adds up (free,
// used and cached blocks, reference counts, each table's size), nothing is
// used once every sequence has ended and nothing is cached after a flush.
#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "properties/common/context.h"
#include "properties/common/every_call.h"
#include "properties/common/verdicts.h"

namespace kvcheck::checks {

namespace {

// What is wrong with the pool after a call, or "".
std::string pool_problem(const PoolReport& r, const Scenario& scenario,
                         const ScenarioRunner& runner, int call) {
  const bool last_call = call == static_cast<int>(scenario.calls.size()) - 1;
  const bool flushed = scenario.calls[size_t(call)].kind == Call::Kind::kFlush;
  const auto text = [](auto... parts) {
    std::ostringstream out;
    (out << ... << parts);
    return out.str();
  };
  if (r.block_size != scenario.block_size) {
    return text("the pool reports block size ", r.block_size, ", the scenario asks for ",
                scenario.block_size);
  }
  // Each tier adds up on its own (TensorRT-LLM's tests assert it per tier).
  if (r.free + r.used + r.cached != r.total || r.free < 0 || r.used < 0 || r.cached < 0) {
    return text("free ", r.free, " + used ", r.used, " + cached ", r.cached, " != total ", r.total);
  }
  if (r.host_free + r.host_used + r.host_cached != r.host_total || r.host_free < 0 ||
      r.host_used < 0 || r.host_cached < 0) {
    return text("host tier: free ", r.host_free, " + used ", r.host_used, " + cached ",
                r.host_cached, " != total ", r.host_total);
  }
  const int blocks = r.total + r.host_total;  // device blocks first, then the host tier's
  if (static_cast<int>(r.refcounts.size()) != blocks) {
    return text(r.refcounts.size(), " reference counts for ", blocks, " blocks");
  }
  std::vector<int> holders(size_t(blocks), 0);  // [block] tables holding it
  for (const auto& [id, table] : r.tables) {
    for (const int b : table) {
      if (b < 0 || b >= blocks) return text("sequence ", id, "'s table holds block ", b);
      ++holders[size_t(b)];
    }
  }
  int held_blocks = 0, held_host = 0;
  for (int b = 0; b < blocks; ++b) {
    if (r.refcounts[size_t(b)] != holders[size_t(b)]) {
      return text("block ", b, ": reference count ", r.refcounts[size_t(b)], ", held by ",
                  holders[size_t(b)], " block tables");
    }
    (b < r.total ? held_blocks : held_host) += holders[size_t(b)] > 0;
  }
  if (r.used != held_blocks) {
    return text("used ", r.used, " blocks, but the tables hold ", held_blocks);
  }
  if (r.host_used != held_host) {
    return text("host tier: used ", r.host_used, " blocks, but the tables hold ", held_host);
  }
  int running = 0;
  for (size_t s = 0; s < scenario.sequences.size(); ++s) {
    const int sequence = static_cast<int>(s);
    if (!runner.running(sequence)) continue;
    ++running;
    const int need = (runner.held(sequence) + r.block_size - 1) / r.block_size;
    const auto table = std::find_if(r.tables.begin(), r.tables.end(),
                                    [&](const auto& t) { return t.first == runner.id(sequence); });
    if (table == r.tables.end()) return text("s", s, " has no block table");
    if (static_cast<int>(table->second.size()) != need) {
      return text("s", s, " holds ", runner.held(sequence), " tokens in ", table->second.size(),
                  " blocks; ", need, " blocks of ", r.block_size, " hold them");
    }
  }
  if (static_cast<int>(r.tables.size()) != running) {
    return text(r.tables.size(), " block tables for ", running, " running sequences");
  }
  if (last_call && running == 0 && r.used + r.host_used != 0) {
    return text("every sequence has ended, yet ", r.used + r.host_used, " blocks are used");
  }
  if (flushed && running == 0 && r.free != r.total) {
    return text("the prefix cache was flushed with no sequence running, yet only ", r.free, " of ",
                r.total, " blocks are free (", r.cached, " cached, ", r.used, " used)");
  }
  if (flushed && r.cached != 0) {
    return text("the prefix cache was flushed, yet ", r.cached, " blocks are cached");
  }
  return "";
}

}  // namespace

Verdict check_pool(const Context& context) {
  const Scenario& scenario = context.scenario;
  if (scenario.block_size == 0) {
    return not_applicable(Property::kPool, "the scenario stores contiguously (block_size 0)");
  }
  return check_after_every_call(
      Property::kPool, context,
      [&](int call, const ScenarioRunner& runner) {
        return pool_problem(runner.engine().pool(), scenario, runner, call);
      },
      "pool accounting (docs/OPERATIONS.md): free + used + cached == total in each tier, each "
      "block's reference count == the block tables holding it, each table ceil(length / B) "
      "blocks, "
      "nothing used once every sequence has ended, nothing cached after a flush and the "
      "whole pool free after a flush with no sequence running\n",
      "the pool added up after " + std::to_string(scenario.calls.size()) + " calls");
}

}  // namespace kvcheck::checks
