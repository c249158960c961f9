# How every program built on the native SSD300 headers is compiled: the native module (native/CMakeLists.txt) and
# the example port (examples/c_port). Include it after project().
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE Release)
endif()
# -O3 without -ffast-math: mining relies on -inf and NaN checks, and results must not depend on reassociation.
set(CMAKE_CXX_FLAGS_RELEASE "-O3")
find_package(OpenMP REQUIRED COMPONENTS CXX)
set(SSD_NATIVE_DIR "${CMAKE_CURRENT_LIST_DIR}")

# OpenBLAS from the scipy-openblas32 wheel (symbols carry the scipy_ prefix), found through a Python that has it:
# sets OPENBLAS_INCLUDE_DIR and OPENBLAS_LIB.
function(find_scipy_openblas python)
  execute_process(
    COMMAND "${python}" -c "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir())"
    OUTPUT_VARIABLE dirs OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  string(REPLACE "\n" ";" dirs "${dirs}")
  list(GET dirs 0 include_dir)
  list(GET dirs 1 lib_dir)
  find_library(OPENBLAS_LIB NAMES scipy_openblas PATHS "${lib_dir}" NO_DEFAULT_PATH REQUIRED)
  set(OPENBLAS_INCLUDE_DIR "${include_dir}" PARENT_SCOPE)
  set(OPENBLAS_LIB "${OPENBLAS_LIB}" PARENT_SCOPE)
endfunction()

# A target on the native headers: their include directories, OpenBLAS's path (opened at run time, not linked:
# openblas.h) and OpenMP, the project's warnings, ISA and no contraction of multiplies and adds (every kernel rounds
# as written).
function(use_native_headers target)
  target_include_directories(${target} PRIVATE "${SSD_NATIVE_DIR}" "${SSD_NATIVE_DIR}/include" "${OPENBLAS_INCLUDE_DIR}")
  target_compile_definitions(${target} PRIVATE SSD_OPENBLAS_LIBRARY="${OPENBLAS_LIB}")
  target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX ${CMAKE_DL_LIBS})
  target_compile_options(${target} PRIVATE -Wall -Wextra -march=x86-64-v3 -ffp-contract=off)
endfunction()
