// What kvcheck needs to talk to a child process it started (an exec engine,
// a hunt worker): blocking whole-buffer IO on a pipe, and how the child
// ended, in words. One text and one loop for every such child.
#pragma once

#include <cstddef>
#include <string>

namespace kvcheck {

// Whole-buffer IO on a file descriptor, retried on EINTR. False on end of
// file or an error.
bool read_exact(int fd, void* data, size_t size);
bool write_all(int fd, const void* data, size_t size);

// "exited with code 3", "killed by signal 11 (Segmentation fault)", for a
// waitpid status.
std::string describe_exit(int wait_status);

}  // namespace kvcheck
