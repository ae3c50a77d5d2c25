# sbx_module(NAME <lib> DIR <dir> LIBS <deps...>)
# Builds a static library from every *.cc in DIR that is not a test, and one test binary per
# *_test.cc (label "unit") and *_itest.cc (label "integration": real kernel, needs root).
# Globbing keeps modules independent: adding a file needs no edit elsewhere.
function(sbx_module)
  cmake_parse_arguments(M "" "NAME;DIR" "LIBS;TEST_LIBS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${M_DIR}/*.cc)
  file(GLOB tests CONFIGURE_DEPENDS ${M_DIR}/*_test.cc ${M_DIR}/*_itest.cc ${M_DIR}/*_fuzz.cc)
  if(tests)
    list(REMOVE_ITEM srcs ${tests})
  endif()
  if(srcs)
    add_library(${M_NAME} STATIC ${srcs})
    target_compile_options(${M_NAME} PRIVATE ${SBX_WARNINGS})
    # PIC: the runtime's libraries also go into libsbx-runtime.so (reference/tools/runtime_module.h);
    # no semantic interposition, so calls inside a library stay direct as in an executable.
    set_target_properties(${M_NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_compile_options(${M_NAME} PRIVATE -fno-semantic-interposition)
    set(scope PUBLIC)
  else()
    add_library(${M_NAME} INTERFACE)  # a module whose sources have not landed yet
    set(scope INTERFACE)
  endif()
  target_include_directories(${M_NAME} ${scope} ${PROJECT_SOURCE_DIR}/reference/include
                                                ${PROJECT_SOURCE_DIR}/reference/src)
  target_link_libraries(${M_NAME} ${scope} ${M_LIBS})
  foreach(t ${tests})
    get_filename_component(tn ${t} NAME_WE)
    if(tn MATCHES "_fuzz$")
      continue()  # fuzz targets are built by fuzz/CMakeLists.txt with clang
    endif()
    if(tn MATCHES "_itest$")
      set(label integration)
    else()
      set(label unit)
    endif()
    sbx_test(${tn} SOURCES ${t} LIBS ${M_NAME} ${M_TEST_LIBS} LABEL ${label})
  endforeach()
endfunction()
