#include "tools/model_option.h"

#include "model/hf_checkpoint.h"
#include "model/status.h"
#include "properties/repro/failure_file.h"

namespace kvcheck::cli {

std::shared_ptr<const Checkpoint> load_model_option(const std::string& folder) {
  if (folder.empty()) return nullptr;
  Result<Checkpoint> loaded = load_hf_checkpoint(folder);
  if (!loaded) throw InputError("--model: " + loaded.error());
  return std::make_shared<const Checkpoint>(std::move(loaded).value());
}

std::shared_ptr<const Checkpoint> case_model(const CaseFile& c, const std::string& folder) {
  if (c.model_path.empty()) {
    if (!folder.empty()) {
      throw InputError("--model " + folder +
                       ": this case uses seeded weights (weight_seed), not a checkpoint; replay "
                       "it without --model");
    }
    return nullptr;
  }
  if (folder.empty()) {
    throw InputError("the case ran on the checkpoint " + c.model_path + " (model_hash " +
                     c.model_hash + "); pass it: --model " + shell_quote(c.model_path));
  }
  std::shared_ptr<const Checkpoint> model = load_model_option(folder);
  if (model->hash != c.model_hash) {
    throw InputError("--model " + folder + ": the files hash to " + model->hash +
                     ", but the case was written on files that hash to " + c.model_hash + " (" +
                     c.model_path +
                     "): the checkpoint changed since, so the case would check another model");
  }
  if (!(model->config == c.scenario.config)) {
    throw InputError("--model " + folder +
                     ": config.json gives another config than the case's model section");
  }
  return model;
}

}  // namespace kvcheck::cli
