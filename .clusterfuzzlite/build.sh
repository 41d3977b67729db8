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
cmake --build "$WORK/build" -j "$(nproc)" --target \
  schedule_fuzz case_file_fuzz safetensors_fuzz \
  schedule_fuzz_seed_corpus case_file_fuzz_seed_corpus safetensors_fuzz_seed_corpus

# OSS-Fuzz layout: the binary, <target>.dict, <target>.options and
# <target>_seed_corpus.zip side by side in $OUT.
for target in schedule_fuzz case_file_fuzz safetensors_fuzz; do
  cp "$WORK/build/fuzz/$target" "$OUT/"
  for extra in "$target.dict" "$target.options" "${target}_seed_corpus.zip"; do
    if [[ -f "$WORK/build/fuzz/$extra" ]]; then cp "$WORK/build/fuzz/$extra" "$OUT/"; fi
  done
done
