// Exports a plugin table under the ABI's entry symbol. The header names both
// the table's type and the symbol kvcheck_plugin_v1, so a C or C++ file that
// includes it cannot declare a function of that name; an assembler label
// gives the function another C++ name and the ABI's symbol.
#pragma once

#include "kvcheck/engine_plugin.h"

#define KVCHECK_TEST_EXPORT_TABLE(table)                                     \
  extern "C" __attribute__((visibility("default"))) const kvcheck_plugin_v1* \
  kvcheck_test_plugin_entry() __asm__(KVCHECK_PLUGIN_ENTRY);                 \
  extern "C" const kvcheck_plugin_v1* kvcheck_test_plugin_entry() {          \
    return table;                                                            \
  }
