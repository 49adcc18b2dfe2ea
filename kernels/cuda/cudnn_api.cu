// cudnn() (cudnn_api.cuh): dlopen and dlsym, once (shared_library.cuh).
#include "cudnn_api.cuh"

#include <kernels/gpu/error.h>

#include "shared_library.cuh"

namespace paralab::kernels::gpu::detail {

namespace {

constexpr SharedLibrary k_cudnn{"cuDNN", "libcudnn.so." PARALAB_SYMBOL_NAME(CUDNN_MAJOR), PARALAB_CUDNN_DIR,
                                "install cuDNN " PARALAB_SYMBOL_NAME(CUDNN_MAJOR) " for this CUDA version"};

CudnnApi load() {
    void* lib = open_shared_library(k_cudnn);  // kept open for the life of the process
    CudnnApi api{};
    bind_symbol(k_cudnn, lib, api.cudnnGetErrorString, "cudnnGetErrorString");
    bind_symbol(k_cudnn, lib, api.cudnnCnnVersionCheck, "cudnnCnnVersionCheck");
    bind_symbol(k_cudnn, lib, api.cudnnCreate, "cudnnCreate");
    bind_symbol(k_cudnn, lib, api.cudnnDestroy, "cudnnDestroy");
    bind_symbol(k_cudnn, lib, api.cudnnSetStream, "cudnnSetStream");
    bind_symbol(k_cudnn, lib, api.cudnnCreateTensorDescriptor, "cudnnCreateTensorDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnSetTensor4dDescriptor, "cudnnSetTensor4dDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnDestroyTensorDescriptor, "cudnnDestroyTensorDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnCreateFilterDescriptor, "cudnnCreateFilterDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnSetFilter4dDescriptor, "cudnnSetFilter4dDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnDestroyFilterDescriptor, "cudnnDestroyFilterDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnCreateConvolutionDescriptor, "cudnnCreateConvolutionDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnSetConvolution2dDescriptor, "cudnnSetConvolution2dDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnSetConvolutionMathType, "cudnnSetConvolutionMathType");
    bind_symbol(k_cudnn, lib, api.cudnnDestroyConvolutionDescriptor, "cudnnDestroyConvolutionDescriptor");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolution2dForwardOutputDim, "cudnnGetConvolution2dForwardOutputDim");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionForwardAlgorithmMaxCount, "cudnnGetConvolutionForwardAlgorithmMaxCount");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionForwardAlgorithm_v7, "cudnnGetConvolutionForwardAlgorithm_v7");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionForwardWorkspaceSize, "cudnnGetConvolutionForwardWorkspaceSize");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionBackwardDataAlgorithmMaxCount,
                "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionBackwardDataAlgorithm_v7, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionBackwardDataWorkspaceSize, "cudnnGetConvolutionBackwardDataWorkspaceSize");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionBackwardFilterAlgorithmMaxCount,
                "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionBackwardFilterAlgorithm_v7, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    bind_symbol(k_cudnn, lib, api.cudnnGetConvolutionBackwardFilterWorkspaceSize,
                "cudnnGetConvolutionBackwardFilterWorkspaceSize");
    bind_symbol(k_cudnn, lib, api.cudnnConvolutionForward, "cudnnConvolutionForward");
    bind_symbol(k_cudnn, lib, api.cudnnAddTensor, "cudnnAddTensor");
    bind_symbol(k_cudnn, lib, api.cudnnConvolutionBackwardData, "cudnnConvolutionBackwardData");
    bind_symbol(k_cudnn, lib, api.cudnnConvolutionBackwardFilter, "cudnnConvolutionBackwardFilter");
    return api;
}

}  // namespace

// A static's initialiser runs once, thread-safely, and runs again on the next call if it threw.
const CudnnApi& cudnn() {
    static const CudnnApi api = load();
    return api;
}

std::string cudnn_load_error() {
    return load_error_of(cudnn);
}

}  // namespace paralab::kernels::gpu::detail
