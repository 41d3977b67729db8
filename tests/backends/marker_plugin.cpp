// A shared object whose loading alone leaves a trace: its constructor runs
// at dlopen, before any symbol is looked up, and writes the file named by
// KVCHECK_MARKER. It exports no plugin entry, so a driver that does load it
// then refuses it ("missing symbol"), too late: the marker shows that code
// named by a case file ran (tests/backends/case_backend_test.py).
#include <cstdio>
#include <cstdlib>

namespace {

__attribute__((constructor)) void leave_marker() {
  const char* path = std::getenv("KVCHECK_MARKER");
  if (path == nullptr) return;
  if (FILE* out = std::fopen(path, "w")) {
    std::fputs("marker_plugin was loaded\n", out);
    std::fclose(out);
  }
}

}  // namespace
