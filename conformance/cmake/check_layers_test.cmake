# check_layers_test.cmake (ctest sandcheck_layers_rule): the include rule of check_layers.cmake
# fails on every kind of violation and passes a tree that keeps it.
#   cmake -DCHECK=<check_layers.cmake> -DWORK=<scratch dir> -P check_layers_test.cmake
cmake_minimum_required(VERSION 3.25)
set(layers_arg "common,scenario,checks")

# case NAME EXPECT(pass|fail) MESSAGE_REGEX FILE CONTENT [FILE CONTENT]...
function(case name expect regex)
  set(root ${WORK}/${name})
  file(REMOVE_RECURSE ${root})
  file(WRITE ${root}/common/base.h "#pragma once\n")
  file(WRITE ${root}/scenario/scenario.h "#pragma once\n#include \"common/base.h\"\n")
  file(WRITE ${root}/checks/checks.h "#pragma once\n#include \"scenario/scenario.h\"\n")
  set(args ${ARGN})
  while(args)
    list(POP_FRONT args f content)
    file(WRITE ${root}/${f} "${content}")
  endwhile()
  execute_process(COMMAND ${CMAKE_COMMAND} -DSRC=${root} -DLAYERS=${layers_arg}
                          -DSTAMP=${root}.stamp -P ${CHECK}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(expect STREQUAL "pass" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${name}: a tree that keeps the rule was refused:\n${err}")
  endif()
  if(expect STREQUAL "fail")
    if(rc EQUAL 0)
      message(FATAL_ERROR "${name}: a violation passed the check")
    endif()
    if(NOT err MATCHES "${regex}")
      message(FATAL_ERROR "${name}: the error does not say '${regex}':\n${err}")
    endif()
  endif()
  message(STATUS "${name}: ${expect} as it must")
endfunction()

case(keeps-the-rule pass "" checks/a.cc "#include \"checks/checks.h\"\n#include \"common/base.h\"\n#include \"sbx/status.h\"\n")
case(goes-up fail "common/up.cc: #include \"checks/checks.h\" goes up"
     common/up.cc "#include \"checks/checks.h\"\n")
case(no-folder fail "checks/b.cc: #include \"scenario.h\" names no folder"
     checks/b.cc "#include \"scenario.h\"\n")
case(not-a-layer fail "net/ is not a folder of the harness"
     checks/c.cc "#include \"net/gateway.h\"\n")
case(runtime-internal fail "is not a file of conformance/src"
     checks/d.cc "#include \"scenario/cgroup.h\"\n")
case(file-outside-folders fail "loose.cc: not in a folder" loose.cc "\n")
