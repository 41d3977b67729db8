// A user's own model (`--model DIR`): a Hugging Face checkpoint folder loaded
// into kvcheck's config and canonical weights. Data only, so that scenarios
// can carry it without linking the loader (model/hf_checkpoint.h).
#pragma once

#include <string>

#include "model/config.h"
#include "model/weights.h"

namespace kvcheck {

struct Checkpoint {
  std::string path;  // the folder, absolute, as case files record it
  std::string hash;  // "fnv1a64:<16 hex digits>" over config.json and the safetensors files read
  Config config;     // from config.json
  Weights weights;   // from the safetensors files, canonical layout
};

}  // namespace kvcheck
