// Writes one deliberately large failing case file per fault into a folder:
// the inputs of the shrink table in docs/CASE_FORMAT.md.
//   make_bloated_cases DIR [MIN_SIZE]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "properties/repro/failure_file.h"
#include "tests/properties/repro/bloated_cases.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_bloated_cases DIR [MIN_SIZE]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int min_size = argc > 2 ? std::atoi(argv[2]) : 60;
  int missing = 0;
  for (const kvcheck::test::FaultTarget& target : kvcheck::test::fault_targets()) {
    const std::string name(kvcheck::fault_name(target.fault));
    const auto c = kvcheck::test::bloated_case(target, min_size);
    if (!c) {
      std::fprintf(stderr, "%s: no failing case of size >= %d\n", name.c_str(), min_size);
      ++missing;
      continue;
    }
    const auto path =
        kvcheck::write_new_file(dir, name + ".bloated", ".case", kvcheck::print_case(*c));
    if (!path) {
      std::fprintf(stderr, "%s\n", path.error().c_str());
      return 2;
    }
    std::printf("%s size %d\n", path.value().c_str(), c->scenario.size());
  }
  return missing == 0 ? 0 : 1;
}
