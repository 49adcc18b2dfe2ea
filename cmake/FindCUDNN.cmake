# Finds cuDNN 9's headers (and, where it is, its library, whose folder the run-time loader tries
# after the soname: kernels/cuda/cudnn_api.cuh). Defines CUDNN_FOUND (the header is enough: the
# library is opened at first use, not linked), CUDNN_INCLUDE_DIR and CUDNN_LIBRARY.
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include
          PATH_SUFFIXES cudnn)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_INCLUDE_DIR)
