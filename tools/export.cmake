# kvcheck-export: seeded weights of a config -> safetensors or GGUF, for outside
# reference tools (tools/reference_torch.py, tools/make_goldens.sh) and llama.cpp.
add_executable(kvcheck-export ${CMAKE_CURRENT_LIST_DIR}/export_model.cpp)
target_link_libraries(kvcheck-export PRIVATE kvcheck_model CLI11::CLI11)
if(KVCHECK_HAVE_ONNX)
  target_link_libraries(kvcheck-export PRIVATE kvcheck_onnx)
  target_compile_definitions(kvcheck-export PRIVATE KVCHECK_HAVE_ONNX=1)
endif()
