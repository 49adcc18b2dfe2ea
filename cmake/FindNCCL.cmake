# Finds NCCL's header next to the CUDA toolkit or in the system paths (and, where it is, its
# library, whose folder the run-time loader tries after the soname: kernels/cuda/nccl_api.cuh).
# Defines NCCL_FOUND (the header is enough: the library is opened at first use, not linked),
# NCCL_INCLUDE_DIR and NCCL_LIBRARY.
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_INCLUDE_DIR)
