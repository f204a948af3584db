# Loaded by CMake after each project() of gRPC's build (CMAKE_PROJECT_INCLUDE, which
# etc/build/cmake sets): once the top-level CMakeLists.txt has defined its targets, the
# core library's C++ sources get grpc-pch.h as a precompiled header.
if(CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR AND NOT DEFINED FERROLET_PCH)
  set(FERROLET_PCH "${CMAKE_CURRENT_LIST_DIR}/grpc-pch.h")
  function(ferrolet_grpc_pch)
    target_precompile_headers(grpc_unsecure PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${FERROLET_PCH}>")
  endfunction()
  cmake_language(DEFER CALL ferrolet_grpc_pch)
endif()
