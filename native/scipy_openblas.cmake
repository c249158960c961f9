# OpenBLAS from the scipy-openblas32 wheel (symbols carry the scipy_ prefix), found through a Python that has it:
# sets OPENBLAS_INCLUDE_DIR, OPENBLAS_LIB_DIR and OPENBLAS_LIB. Used by the native module and the example port.
function(find_scipy_openblas python)
  execute_process(
    COMMAND "${python}" -c "import scipy_openblas32 as s; print(s.get_include_dir()); print(s.get_lib_dir())"
    OUTPUT_VARIABLE dirs OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  string(REPLACE "\n" ";" dirs "${dirs}")
  list(GET dirs 0 include_dir)
  list(GET dirs 1 lib_dir)
  find_library(OPENBLAS_LIB NAMES scipy_openblas PATHS "${lib_dir}" NO_DEFAULT_PATH REQUIRED)
  set(OPENBLAS_INCLUDE_DIR "${include_dir}" PARENT_SCOPE)
  set(OPENBLAS_LIB_DIR "${lib_dir}" PARENT_SCOPE)
  set(OPENBLAS_LIB "${OPENBLAS_LIB}" PARENT_SCOPE)
endfunction()
