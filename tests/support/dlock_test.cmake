# dlock_add_test(NAME <name> LABELS <label>... SOURCES <file>... [TIMEOUT <seconds>]
#                [COST <seconds>] [SHARDS <n>])
#
# One test executable linked with dlock_test_support and dlock_test_main, registered as ONE ctest
# test (not gtest_discover_tests: servers start once per binary) with its labels
# (unit, integration, fault) and a timeout (default 600 s; doubled in a sanitizer tree). ctest
# hands its own environment to the test, so DLOCK_TEST_TIME_SCALE (and the sanitizer *_OPTIONS)
# set when running ctest reach the binary unchanged. Every binary is listed, with its labels, in
# <build>/dlock_tests.txt ("<name> <label,label> <path>" per line) for scripts.
#
# COST: about how long the binary runs under ASan (seconds; the sanitizer stages are the long
# ones). ctest starts the costliest tests first when it has no timings of its own (a clean
# clone), so a long binary does not start last and leave the stage waiting on it alone.
# SHARDS n (n > 1): the binary is registered as n ctest tests, <name>.1 .. <name>.n, each running
# every n-th of its tests (googletest's GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX), with its own
# servers; for a binary that mostly waits (on processes, leases), so its shards overlap. COST is
# then each shard's.
#
# Functions are global in CMake, so this is callable from tests/unit, tests/integration and
# tests/fault once tests/support has been added.
function(dlock_add_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;TIMEOUT;COST;SHARDS" "LABELS;SOURCES")
  if(NOT arg_NAME OR NOT arg_SOURCES OR NOT arg_LABELS)
    message(FATAL_ERROR "dlock_add_test: NAME, LABELS and SOURCES are required")
  endif()
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dlock_add_test(${arg_NAME}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  foreach(label IN LISTS arg_LABELS)
    if(NOT label MATCHES "^(unit|integration|fault)$")
      message(FATAL_ERROR "dlock_add_test(${arg_NAME}): label '${label}' is not unit, integration or fault")
    endif()
  endforeach()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  # The sanitizer stages run the tests slower (DLOCK_TEST_TIME_SCALE=2, scripts/test.sh): a
  # timeout there catches a hang, not a slow binary.
  if(DLOCK_SANITIZE)
    math(EXPR arg_TIMEOUT "${arg_TIMEOUT} * 2")
  endif()

  add_executable(${arg_NAME} ${arg_SOURCES})
  target_link_libraries(${arg_NAME} PRIVATE dlock_test_support dlock_test_main)
  if(DLOCK_TEST_PCH)
    target_precompile_headers(${arg_NAME} REUSE_FROM dlock_test_main)
  endif()
  if(NOT arg_COST)
    set(arg_COST 0)
  endif()
  if(NOT arg_SHARDS)
    set(arg_SHARDS 1)
  endif()
  math(EXPR last "${arg_SHARDS} - 1")
  foreach(index RANGE ${last})
    set(test ${arg_NAME})
    if(arg_SHARDS GREATER 1)
      math(EXPR number "${index} + 1")
      set(test ${arg_NAME}.${number})
    endif()
    add_test(NAME ${test} COMMAND ${arg_NAME})
    set_tests_properties(${test} PROPERTIES LABELS "${arg_LABELS}" TIMEOUT ${arg_TIMEOUT}
                                            COST ${arg_COST})
    if(arg_SHARDS GREATER 1)
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT
                   "GTEST_TOTAL_SHARDS=${arg_SHARDS}" "GTEST_SHARD_INDEX=${index}")
    endif()
  endforeach()

  string(JOIN "," labels ${arg_LABELS})
  set_property(GLOBAL APPEND PROPERTY DLOCK_TEST_BINARIES "${arg_NAME}")
  set_property(GLOBAL PROPERTY DLOCK_TEST_LABELS_${arg_NAME} "${labels}")
endfunction()

# Writes <build>/dlock_tests.txt at the end of configuration (deferred to the top directory so
# every dlock_add_test() call has run).
function(_dlock_write_test_list)
  get_property(names GLOBAL PROPERTY DLOCK_TEST_BINARIES)
  set(content "")
  foreach(name IN LISTS names)
    get_property(labels GLOBAL PROPERTY DLOCK_TEST_LABELS_${name})
    string(APPEND content "${name} ${labels} $<TARGET_FILE:${name}>\n")
  endforeach()
  file(GENERATE OUTPUT "${CMAKE_BINARY_DIR}/dlock_tests.txt" CONTENT "${content}")
endfunction()

get_property(_dlock_list_deferred GLOBAL PROPERTY DLOCK_TEST_LIST_DEFERRED)
if(NOT _dlock_list_deferred)
  set_property(GLOBAL PROPERTY DLOCK_TEST_LIST_DEFERRED TRUE)
  cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _dlock_write_test_list)
endif()
