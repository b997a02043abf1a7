# Build-wide checks for strata's own targets. Included from the root CMakeLists.txt before its
# add_subdirectory() calls; strata's dependencies come through find_package and are not compiled
# here, so nothing below touches third-party code.

# Warnings are errors in strata's C++ so a new one fails the build. Only for C++ compiled by GCC
# (CI's compiler, verified warning-free), not nvcc's CUDA sources (their host-compiler pass is
# not verified yet), clang (scripts/fuzz.sh) or sanitizer builds (scripts/asan.sh), whose
# instrumentation makes GCC's flow warnings report false positives. -DSTRATA_WERROR=OFF to try a
# newer compiler.
option(STRATA_WERROR "Treat compiler warnings as errors in strata's C++ sources (GCC)" ON)
if(STRATA_WERROR AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

# docs_check (ctest, label cpu): every flag README.md and docs/USER_GUIDE.md give strata-train,
# strata-bench and strata-plan is in the tool's --help and the reverse; every YAML key in the
# guide's tables is one of the settings table's (strata-train --settings-markdown) and the reverse. tests/docs_check.py says
# how it reads the docs. Deferred to the end of the root CMakeLists.txt, where include(CTest)
# has set BUILD_TESTING.
set(STRATA_DOCS_CHECK_SCRIPT ${PROJECT_SOURCE_DIR}/tests/docs_check.py)
function(strata_add_docs_check)
  if(NOT BUILD_TESTING)
    return()
  endif()
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(STATUS "strata: python3 not found; the docs_check test is not added")
    return()
  endif()
  set(tools)
  foreach(tool strata-train strata-bench strata-plan)
    list(APPEND tools --tool ${tool}=$<TARGET_FILE:${tool}>)
  endforeach()
  add_test(NAME docs_check COMMAND ${Python3_EXECUTABLE} ${STRATA_DOCS_CHECK_SCRIPT} --root ${PROJECT_SOURCE_DIR}
                                   ${tools})
  set_tests_properties(docs_check PROPERTIES LABELS cpu)
  # The guide's option table is `strata-train --settings-markdown` (tests/settings_doc_check.py --write regenerates it).
  add_test(NAME settings_doc_check COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/settings_doc_check.py --root
                                           ${PROJECT_SOURCE_DIR} --train $<TARGET_FILE:strata-train>)
  set_tests_properties(settings_doc_check PROPERTIES LABELS cpu)
endfunction()
cmake_language(DEFER CALL strata_add_docs_check)
