#include "model/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvcheck {

std::string write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  // The temporary lives beside the target so that the rename stays within one
  // filesystem, where it is atomic.
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return temporary + ": cannot create: " + std::strerror(errno);
  std::string error;
  size_t written = 0;
  while (error.empty() && written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = temporary + ": write failed: " + std::strerror(errno);
    } else {
      written += static_cast<size_t>(n);
    }
  }
  if (error.empty() && ::fsync(fd) != 0)
    error = temporary + ": fsync failed: " + std::strerror(errno);
  if (::close(fd) != 0 && error.empty())
    error = temporary + ": close failed: " + std::strerror(errno);
  std::error_code ec;
  if (error.empty()) {
    std::filesystem::rename(temporary, path, ec);
    if (ec) error = path + ": cannot rename " + temporary + " over it: " + ec.message();
  }
  if (!error.empty()) std::filesystem::remove(temporary, ec);
  return error;
}

}  // namespace kvcheck
