// The server side of the engine protocol (docs/ENGINE_PROTOCOL.md) for any
// engine behind the `Engine` interface: kvcheck-serve (the in-tree CPU
// engine) and the native llama.cpp driver share one request loop, one id
// mapping and one reply encoding, so that a second server cannot drift from
// the protocol the first one proves.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "engine/traits.h"
#include "model/safetensors.h"

namespace kvcheck {

// A loaded model folder; a served engine kind may keep more beside the file
// (a derived class), e.g. a llama.cpp model.
struct ServedModel {
  virtual ~ServedModel() = default;
  ModelFile file;  // the folder's model.safetensors
};

// What a server serves: its traits and how it makes engines.
class EngineMaker {
 public:
  virtual ~EngineMaker() = default;
  virtual EngineTraits traits() = 0;
  // The folder's model (read during `load`: kvcheck may reuse the folder).
  // Default: model.safetensors alone. Throws InputError with the reason.
  virtual std::shared_ptr<ServedModel> load(const std::string& folder);
  // An engine on `model`, options as `create` asked. Throws on refusal.
  virtual std::unique_ptr<Engine> create(ServedModel& model, const EngineOptions& options) = 0;
};

// The spin a server polls stdin for (wire::spin_until_ready): `text` (its
// --spin, or KVCHECK_EXEC_SPIN, which it inherits from kvcheck) read by
// exec_spin, else wire::default_spin() where `text` is null or empty. On a
// bad value prints the reason, `where` naming the source, and returns
// nullopt (the caller exits 2).
std::optional<std::chrono::microseconds> server_spin(const char* text, const std::string& where);

// Serves requests on stdin/stdout until end of file or "bye" (0); 2 on a
// broken frame. `max_version`: the highest protocol version offered;
// `name` prefixes the loop's own messages on stderr.
int serve_engines(EngineMaker& maker, int max_version, std::chrono::microseconds spin,
                  const std::string& name);

}  // namespace kvcheck
