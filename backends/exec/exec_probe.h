// The check, at resolve, that an exec: child answers every optional
// operation its traits declare (backends/exec/exec.cpp's exec_backend).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/traits.h"
#include "model/config.h"

namespace kvcheck {

// An engine of the child on `config` (the probe's tiny models).
using MakeProbeEngine =
    std::function<std::unique_ptr<Engine>(const Config& config, const EngineOptions& options)>;

// A child that declares fork, truncate, pool_report, storage_check, erase,
// shift, offload, save_restore (probed with save) or prefix_cache (probed
// with flush) must
// answer them: checked once, at resolve, so that a contradiction exits 2 with
// the child's refusal (as a plugin's declared but NULL function does) instead
// of failing every case that draws the operation. The probe creates an
// engine on a tiny model the traits accept, asks it to fork and truncate a
// sequence it never started, and for its pool and storage check (which a
// contiguous engine answers too): a child that offers the operation answers
// or refuses with unknown_sequence (any kind but the two below), one that
// lacks it refuses with unsupported or input. It starts nothing and feeds no
// step, so it costs no forward pass and leaves alone the starts and steps a
// test child counts. Any other failure here is left to the properties, which
// report it with a case file.
// Throws InputError naming `spec` and the trait when the child refuses an
// operation it declares.
void probe_declared_operations(const std::string& spec, const EngineTraits& traits,
                               const MakeProbeEngine& make);

}  // namespace kvcheck
