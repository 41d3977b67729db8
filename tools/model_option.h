// `--model DIR` for every driver: a user's Hugging Face checkpoint in place of
// seeded weights (docs/MODELS.md), and the check that a case file written by
// a --model run is replayed on the very same files.
#pragma once

#include <memory>
#include <string>

#include "model/checkpoint.h"
#include "properties/repro/case_file.h"

namespace kvcheck::cli {

// The checkpoint in `folder`, or null when `folder` is empty. Throws
// InputError (exit 2) naming the file, field or tensor it refuses.
std::shared_ptr<const Checkpoint> load_model_option(const std::string& folder);

// The checkpoint a case runs on: null for a seeded case (which refuses a
// --model it did not record); for a --model case the folder given with
// --model, whose files must hash to the case's model_hash and whose config
// must be the case's. Throws InputError saying what to pass or what changed.
std::shared_ptr<const Checkpoint> case_model(const CaseFile& c, const std::string& folder);

}  // namespace kvcheck::cli
