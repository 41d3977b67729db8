#include "backends/exec_child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "backends/exec_wire.h"

extern char** environ;

namespace kvcheck {

namespace {

constexpr size_t kErrTailBytes = 8192;
constexpr int kErrTailLines = 20;
constexpr size_t kReadChunk = 65536;

// A child that dies while we write must not kill kvcheck with SIGPIPE; the
// write then fails with EPIPE and the death is reported as a result.
void ignore_sigpipe() {
  struct sigaction old {};
  sigaction(SIGPIPE, nullptr, &old);
  if (old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

ChildProcess::ChildProcess(std::string command, std::chrono::milliseconds timeout)
    : command_(std::move(command)), timeout_(timeout) {
  ignore_sigpipe();
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw ChildFault("exec " + command_ + ": pipe: " + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  const std::string script = "exec " + command_;
  const char* argv[] = {"/bin/sh", "-c", script.c_str(), nullptr};
  const int rc =
      posix_spawn(&pid_, "/bin/sh", &actions, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  to_child_ = in[1], from_child_ = out[0], child_err_ = err[0];
  if (rc != 0) {
    pid_ = -1;
    throw ChildFault("exec " + command_ + ": cannot start /bin/sh: " + std::strerror(rc));
  }
  fcntl(to_child_, F_SETFL, fcntl(to_child_, F_GETFL) | O_NONBLOCK);
  fcntl(child_err_, F_SETFL, fcntl(child_err_, F_GETFL) | O_NONBLOCK);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    close_fd(to_child_);                         // end of file on stdin: a well-behaved child exits
    for (int i = 0; i < 500 && pid_ > 0; ++i) {  // up to 1 s to exit cleanly
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_)
        pid_ = -1;
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (pid_ > 0) reap(true);
  }
  close_fd(to_child_), close_fd(from_child_), close_fd(child_err_);
}

std::string ChildProcess::reap(bool kill_first) {
  if (pid_ <= 0) return "already gone";
  if (kill_first) kill(pid_, SIGKILL);
  int status = 0;
  // A child that closed stdout may still be exiting: give it a moment.
  for (int i = 0; !kill_first && i < 500; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (!kill_first && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      return "closed its stdout but did not exit (killed)";
  }
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

void ChildProcess::drain_stderr() {
  char buf[4096];
  while (child_err_ >= 0) {
    const ssize_t got = ::read(child_err_, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) close_fd(child_err_);
    if (got <= 0) break;
    err_tail_.append(buf, size_t(got));
    if (err_tail_.size() > 2 * kErrTailBytes) err_tail_.erase(0, err_tail_.size() - kErrTailBytes);
  }
}

std::string ChildProcess::stderr_tail() const {
  std::string tail = err_tail_.size() > kErrTailBytes
                         ? err_tail_.substr(err_tail_.size() - kErrTailBytes)
                         : err_tail_;
  size_t end = tail.size();
  if (end > 0 && tail[end - 1] == '\n') --end;
  size_t begin = end;
  for (int lines = 0; begin > 0; --begin) {
    if (tail[begin - 1] == '\n' && ++lines == kErrTailLines) break;
  }
  tail = tail.substr(begin);
  if (tail.empty()) return "; its stderr was empty";
  return "; the last lines of its stderr:\n" + tail;
}

void ChildProcess::fail(const std::string& call, const std::string& reason) {
  const bool exited = reason.empty();
  const std::string how = reap(!exited);
  // The child is gone: whatever it wrote to stderr before dying is complete.
  if (child_err_ >= 0) fcntl(child_err_, F_SETFL, fcntl(child_err_, F_GETFL) & ~O_NONBLOCK);
  drain_stderr();
  close_fd(to_child_), close_fd(from_child_), close_fd(child_err_);
  throw ChildFault("exec " + command_ + ": " + call + ": " +
                   (exited ? "the child " + how : reason + "; the child was killed") +
                   stderr_tail());
}

bool ChildProcess::wait_ready(int fd, short events) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{fd, events, 0}, {child_err_, POLLIN, 0}};
    const int n = poll(fds, child_err_ >= 0 ? 2 : 1, int(std::min<int64_t>(left.count(), 1 << 30)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (child_err_ >= 0 && fds[1].revents != 0) drain_stderr();
    if (fds[0].revents != 0) return true;
  }
}

void ChildProcess::write_request(const std::string& bytes, const std::string& call) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t put = ::write(to_child_, bytes.data() + done, bytes.size() - done);
    if (put > 0) {
      done += size_t(put);
      continue;
    }
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && errno == EAGAIN) {
      if (!wait_ready(to_child_, POLLOUT))
        fail(call,
             "it did not read its request within " + std::to_string(timeout_.count()) + " ms");
      continue;
    }
    fail(call, "");  // EPIPE: it is gone
  }
}

bool ChildProcess::fill(const std::string& call) {
  if (!wait_ready(from_child_, POLLIN))
    fail(call, "no reply within " + std::to_string(timeout_.count()) + " ms");
  in_.resize(kReadChunk);  // allocated once; never zero-filled again
  ssize_t got;
  do got = ::read(from_child_, in_.data(), in_.size());
  while (got < 0 && errno == EINTR);
  in_pos_ = 0;
  in_end_ = size_t(std::max<ssize_t>(got, 0));
  return got > 0;
}

void ChildProcess::read_exact(void* data, size_t size, const std::string& call) {
  auto* out = static_cast<uint8_t*>(data);
  while (size > 0) {
    if (in_pos_ == in_end_ && !fill(call)) fail(call, "");
    const size_t take = std::min(size, in_end_ - in_pos_);
    std::memcpy(out, in_.data() + in_pos_, take);
    in_pos_ += take, out += take, size -= take;
  }
}

Reply ChildProcess::call(const nlohmann::json& request, size_t max_payloads,
                         size_t max_payload_bytes) {
  const std::string name = request.value("op", std::string("request"));
  if (pid_ <= 0) throw ChildFault("exec " + command_ + ": " + name + ": the child is gone");
  deadline_ = std::chrono::steady_clock::now() + timeout_;
  write_request(wire::frame(request.dump()), name);
  uint8_t header[4];
  read_exact(header, 4, name);
  const uint32_t length = wire::read_le32(header);
  if (length > wire::kMaxControlBytes)
    fail(name, "malformed reply: a control frame of " + std::to_string(length) +
                   " bytes (the bound is " + std::to_string(wire::kMaxControlBytes) + ")");
  std::string text(length, '\0');
  read_exact(text.data(), length, name);
  Reply reply;
  reply.control = nlohmann::json::parse(text, nullptr, false);
  if (reply.control.is_discarded() || !reply.control.is_object())
    fail(name, "malformed reply: the control frame is not a JSON object: " + text.substr(0, 200));
  if (reply.control.contains("error") || !reply.control.contains("payloads")) return reply;
  const nlohmann::json& sizes = reply.control["payloads"];
  if (!sizes.is_array() || sizes.size() > max_payloads)
    fail(name, "malformed reply: \"payloads\" must be an array of at most " +
                   std::to_string(max_payloads) + " sizes");
  for (const nlohmann::json& s : sizes) {
    if (!s.is_number_unsigned() || s.get<uint64_t>() > max_payload_bytes)
      fail(name, "malformed reply: a payload of " + s.dump() + " bytes (at most " +
                     std::to_string(max_payload_bytes) + " expected)");
    uint8_t head[4];
    read_exact(head, 4, name);
    if (wire::read_le32(head) != s.get<uint64_t>())
      fail(name, "malformed reply: a payload frame of " + std::to_string(wire::read_le32(head)) +
                     " bytes where the control frame declared " + s.dump());
    reply.payloads.emplace_back(s.get<size_t>());
    read_exact(reply.payloads.back().data(), reply.payloads.back().size(), name);
  }
  return reply;
}

}  // namespace kvcheck
