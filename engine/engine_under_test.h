// An engine as the harness receives it: how to make one, and what it
// declares. Lives in engine/ (the Engine interface and traits layer) because
// both backends/ (which builds these from a backend string) and properties/
// (which checks them) need it, and backends/ must not include properties/
// (docs/DECISIONS.md, "EngineFactory lives in engine/").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "engine/traits.h"
#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

// Makes a fresh engine for a config, weights and options. Properties call it
// as often as they need (solo runs, reruns); faults are baked into it.
using EngineFactory =
    std::function<std::unique_ptr<Engine>(const Config&, const Weights&, const EngineOptions&)>;

// The engine a property checks: how to make one, what it declares, and for
// P10 the engine it is compared with. Implicit from a bare factory, which is
// then held to the strict contract (every operation, bitwise invariance).
struct EngineUnderTest {
  EngineFactory factory;
  EngineTraits traits = EngineTraits::strict();
  std::string backend;  // the backend string, for case files ("" when unknown)
  std::shared_ptr<const EngineUnderTest> reference;  // P10; null: P10 not applicable
  // The backend sizes a pool the scenario does not name (cpu?paged=B&pool=N):
  // its refusals are data, as for a scenario's own pool_blocks.
  bool forces_pool = false;

  EngineUnderTest(EngineFactory f, EngineTraits t = EngineTraits::strict())  // NOLINT: implicit
      : factory(std::move(f)), traits(std::move(t)) {}
};

}  // namespace kvcheck
