#!/bin/bash -eu
# Builds the fuzz targets for ClusterFuzzLite/OSS-Fuzz with the same CMake
# preset ci/fuzz-campaign uses ("clang"), overriding only what the builder
# decides: its compiler ($CXX), the sanitizer and coverage flags ($CXXFLAGS,
# which CMake takes from the environment) and the fuzzing engine
# ($LIB_FUZZING_ENGINE).
cmake --preset clang -B "$WORK/build" \
  -DCMAKE_CXX_COMPILER="$CXX" \
  -DKVCHECK_FUZZ_ENGINE="$LIB_FUZZING_ENGINE" \
  -DKVCHECK_BENCH=OFF -DKVCHECK_CUDA=OFF
# The targets ci/test fuzzes (its fuzz_targets line; the ctest
# ci.fuzz_targets_agree holds the two lists and fuzz/CMakeLists.txt equal).
fuzz_targets=(schedule_fuzz case_file_fuzz safetensors_fuzz exec_reply_fuzz)
cmake --build "$WORK/build" -j "$(nproc)" --target \
  "${fuzz_targets[@]}" "${fuzz_targets[@]/%/_seed_corpus}"

# OSS-Fuzz layout: the binary, <target>.dict, <target>.options and
# <target>_seed_corpus.zip side by side in $OUT.
for target in "${fuzz_targets[@]}"; do
  cp "$WORK/build/fuzz/$target" "$OUT/"
  for extra in "$target.dict" "$target.options" "${target}_seed_corpus.zip"; do
    if [[ -f "$WORK/build/fuzz/$extra" ]]; then cp "$WORK/build/fuzz/$extra" "$OUT/"; fi
  done
done
