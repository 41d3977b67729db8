// Reading a whole file into memory: model files (safetensors, a checkpoint's
// index), with one message convention for what can go wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/status.h"

namespace kvcheck {

// The file's bytes, or a message starting with the path: "is a directory",
// "cannot open: <reason>", "read failed: <reason>". Plain system calls (open,
// fstat, read, close): an exec engine's child loads a model per case, and a
// stream's seeks and checks were as many calls again.
Result<std::vector<uint8_t>> read_file_bytes(const std::string& path);

}  // namespace kvcheck
