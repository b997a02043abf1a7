# Runs clang-format --dry-run --Werror over the project's C++/CUDA sources.
file(GLOB_RECURSE SOURCES
     ${ROOT}/engine/*.cpp ${ROOT}/engine/*.h ${ROOT}/io/*.cpp ${ROOT}/io/*.h ${ROOT}/kernels/*.cpp ${ROOT}/kernels/*.h
     ${ROOT}/kernels/*.cu ${ROOT}/kernels/*.cuh ${ROOT}/model/*.cpp ${ROOT}/model/*.h ${ROOT}/tools/*.cpp
     ${ROOT}/tools/*.h ${ROOT}/tests/*.cpp ${ROOT}/tests/*.h)
execute_process(COMMAND ${CLANG_FORMAT} --dry-run --Werror ${SOURCES} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "clang-format: files differ from .clang-format (run clang-format -i on them):\n${err}")
endif()
message(STATUS "clang-format: ${CMAKE_ARGC} ok")
