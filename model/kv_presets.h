// Published shapes of well-known models, for `kvcheck memory NAME`. Each entry
// cites the config.json field values it was copied from (docs/MEMORY.md).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "model/kv_memory.h"

namespace kvcheck {

const std::vector<KvShape>& kv_presets();
std::optional<KvShape> find_kv_preset(std::string_view name);

}  // namespace kvcheck
