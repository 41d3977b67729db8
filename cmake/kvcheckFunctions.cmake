# kvcheck_add_conformance_test(NAME SOURCES src... [LIBRARIES lib...] [ARGS arg...])
#
# A conformance test of your engine: an executable from SOURCES (one of them
# holds KVCHECK_CONFORMANCE_MAIN, kvcheck/conformance.h) linked with
# kvcheck::conformance and LIBRARIES, registered with ctest as NAME and run
# with ARGS (e.g. --cases 100). The binary also replays and shrinks its own
# case files: NAME --replay FILE, NAME --shrink FILE.
function(kvcheck_add_conformance_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBRARIES;ARGS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "kvcheck_add_conformance_test(${name}): SOURCES is empty")
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE kvcheck::conformance ${ARG_LIBRARIES})
  add_test(NAME ${name} COMMAND ${name} ${ARG_ARGS})
endfunction()
