# check_layers_test.cmake (ctest layers_rule): the include rule of check_layers.cmake (used by
# conformance/src and reference/src) fails on every kind of violation and passes a tree that
# keeps it, nested layers included.
#   cmake -DCHECK=<check_layers.cmake> -DWORK=<scratch dir> -P check_layers_test.cmake
cmake_minimum_required(VERSION 3.25)
set(layers_arg "common,scenario,checks,backend,backend/oci,backend/gvisor")

# case NAME EXPECT(pass|fail) MESSAGE_REGEX FILE CONTENT [FILE CONTENT]...
function(case name expect regex)
  set(root ${WORK}/${name})
  file(REMOVE_RECURSE ${root})
  file(WRITE ${root}/common/base.h "#pragma once\n")
  file(WRITE ${root}/scenario/scenario.h "#pragma once\n#include \"common/base.h\"\n")
  file(WRITE ${root}/checks/checks.h "#pragma once\n#include \"scenario/scenario.h\"\n")
  file(WRITE ${root}/backend/backend.h "#pragma once\n#include \"checks/checks.h\"\n")
  file(WRITE ${root}/backend/oci/oci.h "#pragma once\n#include \"backend/backend.h\"\n")
  set(args ${ARGN})
  while(args)
    list(POP_FRONT args f content)
    file(WRITE ${root}/${f} "${content}")
  endwhile()
  execute_process(COMMAND ${CMAKE_COMMAND} -DSRC=${root} -DLAYERS=${layers_arg} -DNAME=tree
                          "-DONLY=sbx/http_client.h:backend,sbx/runtime.h:checks"
                          "-DONLY_WHY=only they talk to a target"
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
case(not-a-layer fail "net/ is not a folder of tree"
     checks/c.cc "#include \"net/gateway.h\"\n")
case(runtime-internal fail "is not a file of tree"
     checks/d.cc "#include \"scenario/cgroup.h\"\n")
case(file-outside-folders fail "loose.cc: not in a folder" loose.cc "\n")
case(nested-keeps-the-rule pass "" backend/gvisor/g.cc "#include \"backend/oci/oci.h\"\n#include \"common/base.h\"\n"
     backend/oci/guest/agent.c "#include \"backend/oci/oci.h\"\n")
case(nested-goes-up fail "backend/oci/up.cc: #include \"backend/gvisor/g.h\" goes up \\(backend/oci/ may include"
     backend/gvisor/g.h "#pragma once\n" backend/oci/up.cc "#include \"backend/gvisor/g.h\"\n")
case(parent-of-nested-goes-up fail "backend/reg.cc: #include \"backend/oci/oci.h\" goes up"
     backend/reg.cc "#include \"backend/oci/oci.h\"\n")
case(relative-path fail "\\.\\./ is not a folder of tree"
     backend/oci/rel.cc "#include \"../../common/base.h\"\n")
case(c-file-checked fail "backend/oci/guest/bad.c: #include \"backend/gvisor/g.h\" goes up"
     backend/gvisor/g.h "#pragma once\n" backend/oci/guest/bad.c "#include \"backend/gvisor/g.h\"\n")
case(only-from-its-layer pass "" backend/h.cc "#include \"sbx/http_client.h\"\n"
     backend/oci/h.cc "#include \"sbx/http_client.h\"\n" checks/r.cc "#include \"sbx/runtime.h\"\n")
case(only-elsewhere fail "scenario/h.cc: #include \"sbx/http_client.h\": only backend/ may include it \\(only they talk to a target\\)"
     scenario/h.cc "#include \"sbx/http_client.h\"\n")
case(only-above fail "backend/r.cc: #include \"sbx/runtime.h\": only checks/ may include it"
     backend/r.cc "#include \"sbx/runtime.h\"\n")
