# An ExecuTorch built from source and installed (the Android NDK build: static libraries, bare
# target names) under the names the wheel's package gives its shared libraries, so that the
# kernels, the runner and the JNI bridge link either the same way. The registration-only
# libraries (operator kernels, XNNPACK) are whole-archived: nothing references their symbols.
set(_runtime_parts executorch executorch_core extension_module_static extension_tensor extension_data_loader
    extension_flat_tensor extension_named_data_map extension_threadpool cpuinfo pthreadpool)
set(_present "")
foreach(part IN LISTS _runtime_parts)
  if(TARGET ${part})
    list(APPEND _present ${part})
  endif()
endforeach()
foreach(required executorch_core extension_module_static extension_tensor optimized_native_cpu_ops_lib
                 xnnpack_backend)
  if(NOT TARGET ${required})
    message(FATAL_ERROR "executorch_DIR=${executorch_DIR}: this ExecuTorch install has no '${required}' "
                        "(build it with the android-arm64-v8a preset, which turns on the module and tensor "
                        "extensions, the optimized kernels and XNNPACK; see android/README.md)")
  endif()
endforeach()
add_library(executorch::runtime INTERFACE IMPORTED)
set_target_properties(executorch::runtime PROPERTIES INTERFACE_LINK_LIBRARIES "${_present}")
foreach(pair "kernels_optimized=optimized_native_cpu_ops_lib" "backend_xnnpack=xnnpack_backend")
  string(REPLACE "=" ";" pair "${pair}")
  list(GET pair 0 alias)
  list(GET pair 1 lib)
  add_library(executorch::${alias} INTERFACE IMPORTED)
  set_target_properties(executorch::${alias} PROPERTIES
    INTERFACE_LINK_LIBRARIES "$<LINK_LIBRARY:WHOLE_ARCHIVE,${lib}>;executorch::runtime")
endforeach()
if(TARGET quantized_ops_lib)  # optional: quantized token embeddings
  add_library(executorch::kernels_quantized INTERFACE IMPORTED)
  set_target_properties(executorch::kernels_quantized PROPERTIES
    INTERFACE_LINK_LIBRARIES "$<LINK_LIBRARY:WHOLE_ARCHIVE,quantized_ops_lib>;executorch::runtime")
endif()
set(SPEC_EDGE_EXECUTORCH_STATIC ON)
