// Row-major GEMM over cuBLAS (kernels/gpu/gemm.h). cuBLAS is column-major, and a row-major
// [r, c] array with leading dimension ld is the column-major [c, r] array of its transpose with
// the same ld; so row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLAS gets
// B first, then A, with N and M swapped and each operand's transpose flag as given.
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/detail/op_lists.h>

#include <climits>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "check.cuh"
#include "cublas_api.cuh"
#include "launch.cuh"

namespace paralab::kernels::gpu {

namespace {

using detail::cublas;
using detail::require;

// One handle per (device, stream): a handle keeps the stream it was set to, and work on two
// streams of one GPU (virtual devices, or compute and communication) must not share one. Beside
// each handle, the device array of operand pointers that batched products on that stream fill
// and read (detail::cublas_pointer_arrays_for).
class HandleCache {
public:
    cublasHandle_t handle_for(void* stream) {
        std::lock_guard lock(m_mutex);
        return state_for(stream).handle;
    }

    void** pointer_arrays_for(void* stream, int64_t count) {
        std::lock_guard lock(m_mutex);
        State& state = state_for(stream);
        if (state.capacity >= count) return state.pointers;
        cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        PARALAB_GPU_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture));
        if (capture != cudaStreamCaptureStatusNone) return nullptr;  // no allocation in a capture
        if (state.pointers) {  // products queued on the stream may still read the old array
            PARALAB_GPU_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
            PARALAB_GPU_CHECK(cudaFree(state.pointers));
            state.pointers = nullptr;
            state.capacity = 0;
        }
        PARALAB_GPU_CHECK(cudaMalloc(reinterpret_cast<void**>(&state.pointers),
                                     static_cast<size_t>(count) * sizeof(void*)));
        state.capacity = count;
        return state.pointers;
    }

    int release(void* stream) {
        std::lock_guard lock(m_mutex);
        int released = 0;
        for (auto it = m_states.begin(); it != m_states.end();) {
            if (it->first.second == stream) {
                detail::DeviceGuard guard(it->first.first);
                PARALAB_GPU_CHECK(cublas().destroy(it->second.handle));
                if (it->second.pointers) PARALAB_GPU_CHECK(cudaFree(it->second.pointers));
                it = m_states.erase(it);
                ++released;
            } else {
                ++it;
            }
        }
        return released;
    }

private:
    struct State {
        cublasHandle_t handle = nullptr;
        void** pointers = nullptr;  // device memory for `capacity` pointers
        int64_t capacity = 0;
    };

    // The current device's state for `stream`, its handle made and set to the stream on first
    // use. Called with m_mutex held.
    State& state_for(void* stream) {
        int device = 0;
        PARALAB_GPU_CHECK(cudaGetDevice(&device));
        auto it = m_states.find({device, stream});
        if (it != m_states.end()) return it->second;
        cublasHandle_t handle = nullptr;
        PARALAB_GPU_CHECK(cublas().create(&handle));  // bound to the current device
        const cublasStatus_t status =
            cublas().set_stream(handle, static_cast<cudaStream_t>(stream));
        if (status != CUBLAS_STATUS_SUCCESS) {
            cublas().destroy(handle);
            PARALAB_GPU_CHECK(status);
        }
        return m_states.emplace(std::make_pair(device, stream), State{handle}).first->second;
    }

    std::mutex m_mutex;
    std::map<std::pair<int, void*>, State> m_states;  // guarded by m_mutex
};

// Never destroyed: handles still alive at exit belong to a driver that is shutting down, and
// cublasDestroy from a static destructor may run after the CUDA runtime has gone.
HandleCache& handles() {
    static HandleCache* cache = new HandleCache;
    return *cache;
}

using detail::check_gemm_shape;

cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

}  // namespace

cublasHandle_t detail::cublas_handle_for(void* stream) {
    return handles().handle_for(stream);
}

void** detail::cublas_pointer_arrays_for(void* stream, int64_t count) {
    return handles().pointer_arrays_for(stream, count);
}

// op(A): [M, K], op(B): [K, N] -> C: [M, N], row-major
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc, void* stream,
          GemmMath math) {
    check_gemm_shape("gemm", trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    const cublasHandle_t handle = handles().handle_for(stream);
    if constexpr (std::is_same_v<T, float>) {
        const cublasComputeType_t compute =
            math == GemmMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        PARALAB_GPU_CHECK(cublas().gemm_ex(handle, op(trans_b), op(trans_a), static_cast<int>(N),
                                           static_cast<int>(M), static_cast<int>(K), &alpha, B,
                                           CUDA_R_32F, static_cast<int>(ldb), A, CUDA_R_32F,
                                           static_cast<int>(lda), &beta, C, CUDA_R_32F,
                                           static_cast<int>(ldc), compute, CUBLAS_GEMM_DEFAULT));
    } else {
        static_assert(std::is_same_v<T, double>, "gemm: T = float or double");
        (void)math;  // no tensor-core shortcut for double
        PARALAB_GPU_CHECK(cublas().dgemm(handle, op(trans_b), op(trans_a), static_cast<int>(N),
                                         static_cast<int>(M), static_cast<int>(K), &alpha, B,
                                         static_cast<int>(ldb), A, static_cast<int>(lda), &beta, C,
                                         static_cast<int>(ldc)));
    }
}

PARALAB_GPU_INSTANTIATE_FLOAT_TYPES(PARALAB_GPU_GEMM_OPS)

void gemm_half(HalfType type, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
               float beta, float* C, int64_t ldc, void* stream) {
    check_gemm_shape("gemm_half", trans_a, trans_b, M, N, K, lda, ldb, ldc);
    if (M == 0 || N == 0) return;
    const cudaDataType_t in = type == HalfType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    PARALAB_GPU_CHECK(cublas().gemm_ex(
        handles().handle_for(stream), op(trans_b), op(trans_a), static_cast<int>(N),
        static_cast<int>(M), static_cast<int>(K), &alpha, B, in, static_cast<int>(ldb), A, in,
        static_cast<int>(lda), &beta, C, CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
}

int release_gemm_handles(void* stream) {
    return handles().release(stream);
}

}  // namespace paralab::kernels::gpu
