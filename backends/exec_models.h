// The scratch folders the exec backend hands to its child: one per model,
// keyed by the config and a hash of the weights (which the weight seed
// determines), each with model.safetensors (Hugging Face names) and
// config.json. Written without fsync (scratch, not results), at most
// kMaxFolders kept, all removed when the process exits.
#pragma once

#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

// The folder holding this model, written on first use. Throws InputError when
// the scratch folder cannot be written.
std::string exec_model_folder(const Config& config, const Weights& weights);

}  // namespace kvcheck
