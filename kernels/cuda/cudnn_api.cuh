// cuDNN, opened on first use instead of linked (shared_library.cuh), like cuBLAS
// (cublas_api.cuh): a CUDA build then starts on a machine without cuDNN, where the GPU
// convolution answers cudnn_available() false, and a process that runs no GPU convolution never
// maps it. Only the functions conv.cu and check_cudnn.cuh call are bound, with their declared
// types, so that a changed signature fails to compile. Built where CMake found cudnn.h
// (PARALAB_HAVE_CUDNN). Private to kernels/cuda: it needs cuDNN types.
// Each member is named after its function, so that a failed call's statement in GpuError reads
// `dnn().cudnnCreate(&handle)`.
#pragma once

#include <cudnn.h>

#include <string>

namespace paralab::kernels::gpu::detail {

struct CudnnApi {
    decltype(&::cudnnGetErrorString) cudnnGetErrorString;
    decltype(&::cudnnCnnVersionCheck) cudnnCnnVersionCheck;
    decltype(&::cudnnCreate) cudnnCreate;
    decltype(&::cudnnDestroy) cudnnDestroy;
    decltype(&::cudnnSetStream) cudnnSetStream;
    decltype(&::cudnnCreateTensorDescriptor) cudnnCreateTensorDescriptor;
    decltype(&::cudnnSetTensor4dDescriptor) cudnnSetTensor4dDescriptor;
    decltype(&::cudnnDestroyTensorDescriptor) cudnnDestroyTensorDescriptor;
    decltype(&::cudnnCreateFilterDescriptor) cudnnCreateFilterDescriptor;
    decltype(&::cudnnSetFilter4dDescriptor) cudnnSetFilter4dDescriptor;
    decltype(&::cudnnDestroyFilterDescriptor) cudnnDestroyFilterDescriptor;
    decltype(&::cudnnCreateConvolutionDescriptor) cudnnCreateConvolutionDescriptor;
    decltype(&::cudnnSetConvolution2dDescriptor) cudnnSetConvolution2dDescriptor;
    decltype(&::cudnnSetConvolutionMathType) cudnnSetConvolutionMathType;
    decltype(&::cudnnDestroyConvolutionDescriptor) cudnnDestroyConvolutionDescriptor;
    decltype(&::cudnnGetConvolution2dForwardOutputDim) cudnnGetConvolution2dForwardOutputDim;
    decltype(&::cudnnGetConvolutionForwardAlgorithmMaxCount) cudnnGetConvolutionForwardAlgorithmMaxCount;
    decltype(&::cudnnGetConvolutionForwardAlgorithm_v7) cudnnGetConvolutionForwardAlgorithm_v7;
    decltype(&::cudnnGetConvolutionForwardWorkspaceSize) cudnnGetConvolutionForwardWorkspaceSize;
    decltype(&::cudnnGetConvolutionBackwardDataAlgorithmMaxCount) cudnnGetConvolutionBackwardDataAlgorithmMaxCount;
    decltype(&::cudnnGetConvolutionBackwardDataAlgorithm_v7) cudnnGetConvolutionBackwardDataAlgorithm_v7;
    decltype(&::cudnnGetConvolutionBackwardDataWorkspaceSize) cudnnGetConvolutionBackwardDataWorkspaceSize;
    decltype(&::cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) cudnnGetConvolutionBackwardFilterAlgorithmMaxCount;
    decltype(&::cudnnGetConvolutionBackwardFilterAlgorithm_v7) cudnnGetConvolutionBackwardFilterAlgorithm_v7;
    decltype(&::cudnnGetConvolutionBackwardFilterWorkspaceSize) cudnnGetConvolutionBackwardFilterWorkspaceSize;
    decltype(&::cudnnConvolutionForward) cudnnConvolutionForward;
    decltype(&::cudnnAddTensor) cudnnAddTensor;
    decltype(&::cudnnConvolutionBackwardData) cudnnConvolutionBackwardData;
    decltype(&::cudnnConvolutionBackwardFilter) cudnnConvolutionBackwardFilter;
};

// The library (libcudnn.so.<CUDNN_MAJOR>), opened once (thread-safe): by soname first, so that
// LD_LIBRARY_PATH and the system's library cache apply, then from the folder the build found it
// in. Throws GpuError naming the library and the loader's reason when it cannot be opened or
// lacks a function; a later call tries again.
const CudnnApi& cudnn();

// Why cudnn() cannot be had ("cannot open libcudnn.so.9 (...)"), or empty once it is loaded.
// Opens the library when it is not open yet.
std::string cudnn_load_error();

}  // namespace paralab::kernels::gpu::detail
