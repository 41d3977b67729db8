// Replacing a file so that readers see the old file or the new one, never a
// half-written one. Used by every writer of model files (safetensors, GGUF).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/status.h"

namespace kvcheck {

// Writes `bytes` to PATH.tmp.<pid> beside `path`, fsyncs it and renames it
// over `path`. Returns an empty string on success, else a message naming the
// path; the temporary is removed on failure.
std::string write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

// The same for the bytes that make() returns: a model writer's InputError
// (bad config or weights) becomes the message, prefixed with the path.
template <class MakeBytes>
std::string write_file_atomically_from(const std::string& path, MakeBytes&& make) {
  std::vector<uint8_t> bytes;
  try {
    bytes = make();
  } catch (const InputError& e) {
    return path + ": " + e.what();
  }
  return write_file_atomically(path, bytes);
}

}  // namespace kvcheck
