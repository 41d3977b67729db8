// EngineTraits <-> JSON: the one form the C plugin ABI, the wire protocol's
// handshake and `kvcheck backends --json` share (docs/ENGINES.md lists every
// key). Every key is optional with the default of EngineTraits (the strict,
// bitwise, everything-supported contract) except identity.name; unknown keys
// are errors, so a misspelt trait cannot silently fall back to a default.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/traits.h"
#include "model/status.h"

namespace kvcheck {

nlohmann::json traits_to_json(const EngineTraits& traits);

// Errors name the key path and the value ("traits.limits.max_rows: expected a
// positive integer, got -1"); the result is validated.
Result<EngineTraits> traits_from_json(const nlohmann::json& json);
Result<EngineTraits> traits_from_json_text(std::string_view text);

}  // namespace kvcheck
