# cmake --install build --prefix P: static libraries, include/strata (the public headers only), the
# tools, and the CMake package (find_package(strata CONFIG): strata::strata) with a strata.pc.
include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_LIBS strata_api strata_model strata_run strata_plan strata_train strata_data strata_llama strata_kernels strata_text strata_engine strata_io)
if(STRATA_HAVE_CUDA)
  list(APPEND STRATA_INSTALL_LIBS strata_kernels_cuda)
endif()
set(STRATA_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/strata)

install(TARGETS ${STRATA_INSTALL_LIBS} EXPORT strataTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/strata DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS ${STRATA_TOOLS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT strataTargets NAMESPACE strata:: DESTINATION ${STRATA_CMAKE_DIR})

# yaml-cpp is a file path where its static library was found, else the yaml-cpp target.
if(TARGET yaml-cpp OR TARGET yaml-cpp::yaml-cpp)
  set(STRATA_NEEDS_YAML_TARGET ON)
else()
  set(STRATA_NEEDS_YAML_TARGET OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/strataConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/strataConfig.cmake INSTALL_DESTINATION ${STRATA_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/strataConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/strataConfig.cmake ${PROJECT_BINARY_DIR}/strataConfigVersion.cmake
        DESTINATION ${STRATA_CMAKE_DIR})

# pkg-config: the libraries as one link group (engine and io reference each other).
set(STRATA_PC_LIBS "-Wl,--start-group -lstrata -lstrata_run -lstrata_plan -lstrata_train -lstrata_data -lstrata_llama -lstrata_kernels")
set(STRATA_PC_PRIVATE "")
if(STRATA_HAVE_CUDA)
  string(APPEND STRATA_PC_LIBS " -lstrata_kernels_cuda")
  string(APPEND STRATA_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublasLt ${CUDNN_LIB}")
endif()
string(APPEND STRATA_PC_LIBS " -lstrata_text -lstrata_engine -lstrata_io -Wl,--end-group")
if(YAML_CPP_STATIC)
  string(APPEND STRATA_PC_PRIVATE " ${YAML_CPP_STATIC}")
else()
  string(APPEND STRATA_PC_PRIVATE " -lyaml-cpp")
endif()
string(APPEND STRATA_PC_PRIVATE " ${ONIG_STATIC} ${URING_STATIC} -lpthread")
# Relocatable: the prefix is found from the .pc file's own directory.
file(RELATIVE_PATH STRATA_PC_UP /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" STRATA_PC_UP "${STRATA_PC_UP}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/strata.pc.in ${PROJECT_BINARY_DIR}/strata.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/strata.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
