# Which backends this build compiles in (reference/src/backend/CMakeLists.txt; docs/backends.md).
# SBX_BACKENDS leaves backends out of the build: a left-out backend is still named by the
# runtime's info, unavailable with the reason "not compiled in".
set(SBX_ALL_BACKENDS native wasm oci gvisor microvm remote)
set(SBX_BACKENDS "${SBX_ALL_BACKENDS}" CACHE STRING
    "backends compiled in, ';'-separated, from: native wasm oci gvisor microvm remote")
foreach(b ${SBX_BACKENDS})
  if(NOT b IN_LIST SBX_ALL_BACKENDS)
    message(FATAL_ERROR "SBX_BACKENDS: unknown backend '${b}' (known: ${SBX_ALL_BACKENDS})")
  endif()
endforeach()
# What each backend is built on, among the backends.
set(sbx_needs_wasm native)
set(sbx_needs_gvisor oci)
foreach(b ${SBX_BACKENDS})
  foreach(n ${sbx_needs_${b}})
    if(NOT n IN_LIST SBX_BACKENDS)
      message(FATAL_ERROR "SBX_BACKENDS: ${b} is built on ${n}; add ${n} or leave ${b} out")
    endif()
  endforeach()
endforeach()

# The WASI host: how a module compiled ahead of time by wasm2c becomes a static executable that
# runs in a wasm sandbox (reference/src/backend/wasm/host/; docs/wasm.md). The fixtures call it
# for their module; the host's sources are built here with the project's C warnings.
function(sbx_wasm_host name)
  cmake_parse_arguments(H "" "MODULE_C;MODULE_DIR;WASM_RT" "" ${ARGN})
  set(dir ${PROJECT_SOURCE_DIR}/reference/src/backend/wasm/host)
  set(host_src ${dir}/wasi_host.c ${dir}/wasi_host_fd.c ${dir}/wasi_host_path.c ${dir}/wasm_host_main.c)
  add_executable(${name} ${H_MODULE_C} ${H_WASM_RT}/wasm-rt-impl.c ${host_src})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/reference/src)
  target_include_directories(${name} SYSTEM PRIVATE ${H_MODULE_DIR} ${H_WASM_RT})
  set_source_files_properties(${host_src} PROPERTIES COMPILE_OPTIONS "${SBX_C_WARNINGS};-std=gnu11")
  target_link_options(${name} PRIVATE -static -Wl,--wrap=wasm_rt_allocate_memory
                                      -Wl,--wrap=wasm_rt_grow_memory -Wl,--wrap=wasm_rt_free_memory)
  target_link_libraries(${name} PRIVATE m)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tools)
endfunction()
