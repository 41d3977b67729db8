// Runs the kvcheck binary as a person does (through the shell, stdout and
// stderr together) for the tests that hold its output and exit codes.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kvcheck::test {

struct CliRun {
  int code = -1;
  std::string output;  // stdout and stderr together
};

inline CliRun run_kvcheck(const std::string& arguments) {
  const std::string command = std::string(KVCHECK_BINARY) + " " + arguments + " 2>&1";
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

}  // namespace kvcheck::test
