#include "model/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvcheck {

Result<std::vector<uint8_t>> read_file_bytes(const std::string& path) {
  using R = Result<std::vector<uint8_t>>;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return R::failure(path + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return R::failure(path + ": cannot open: " + std::strerror(error));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    return R::failure(path + ": is a directory");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(info.st_size));  // [size] the whole file
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error = got < 0 ? errno : 0;
      ::close(fd);
      return R::failure(path + ": read failed: " +
                        (error != 0 ? std::strerror(error) : "the file shrank while it was read"));
    }
    done += size_t(got);
  }
  ::close(fd);
  return bytes;
}

}  // namespace kvcheck
