# `cmake --install`: the conformance suite and everything it links, as the
# CMake package kvcheck (find_package(kvcheck) -> kvcheck::conformance and
# kvcheck_add_conformance_test(); docs/ENGINES.md), and the programs kvcheck,
# kvcheck-serve and kvcheck-export in bin/. Headers keep their tree
# paths under include/kvcheck/, which is on the include path of every
# exported target, so "engine/engine.h" resolves as it does in the tree;
# include/ holds the two public entry headers kvcheck/conformance.h and
# kvcheck/engine_plugin.h. The CUDA engine is not part of the package.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The registry and suite without the CUDA engine (backends/CMakeLists.txt).
set(suffix "")
if(KVCHECK_HAVE_CUDA)
  set(suffix _cpu)
endif()
set(kvcheck_package_targets
    kvcheck_model kvcheck_oracle kvcheck_kv_dtype kvcheck_engine kvcheck_cpu_kernels
    kvcheck_cpu_engine kvcheck_properties kvcheck_rc kvcheck_repro kvcheck_exec_wire
    kvcheck_backends${suffix}
    kvcheck_conformance${suffix})
foreach(target IN LISTS kvcheck_package_targets)
  # kvcheck_conformance(_cpu) -> kvcheck::conformance
  string(REGEX REPLACE "^kvcheck_|_cpu$" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  target_include_directories(${target} INTERFACE
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/kvcheck>)
endforeach()

install(TARGETS ${kvcheck_package_targets} EXPORT kvcheckTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})

foreach(dir model oracle engine engine/cpu properties properties/rc properties/repro backends
            backends/exec conformance)
  file(GLOB headers ${PROJECT_SOURCE_DIR}/${dir}/*.h)
  install(FILES ${headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvcheck/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/kvcheck/engine_plugin.h
              ${PROJECT_SOURCE_DIR}/include/kvcheck/conformance.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvcheck)

set(kvcheck_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kvcheck)
install(EXPORT kvcheckTargets NAMESPACE kvcheck:: DESTINATION ${kvcheck_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvcheckConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kvcheckConfig.cmake
                              INSTALL_DESTINATION ${kvcheck_cmake_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvcheckConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvcheckConfig.cmake
              ${PROJECT_BINARY_DIR}/kvcheckConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/kvcheckFunctions.cmake
        DESTINATION ${kvcheck_cmake_dir})

# kvcheck::plugin_abi: only the C header of the plugin ABI, for a plugin
# that links nothing of kvcheck.
add_library(kvcheck_plugin_abi INTERFACE)
set_target_properties(kvcheck_plugin_abi PROPERTIES EXPORT_NAME plugin_abi)
target_include_directories(kvcheck_plugin_abi INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
install(TARGETS kvcheck_plugin_abi EXPORT kvcheckTargets)

# The programs, beside each other as in the build tree: kvcheck hands the
# kvcheck-export beside itself to exec adapters (backends/exec/exec_child.cpp),
# so every README command runs the same from build/release/tools and from bin/.
set(kvcheck_programs kvcheck kvcheck-serve kvcheck-export)
install(TARGETS ${kvcheck_programs} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# `cmake --build ... --target kvcheck_package`: everything the install takes.
add_custom_target(kvcheck_package DEPENDS ${kvcheck_package_targets} ${kvcheck_programs})
