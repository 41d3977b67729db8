// `--backend plugin:PATH.so[?options]`: an engine in a shared object that
// exports the C table of include/kvcheck/engine_plugin.h, loaded with dlopen.
#pragma once

#include "backends/registry.h"

namespace kvcheck {

void register_plugin_loader(BackendRegistry& registry);

}  // namespace kvcheck
