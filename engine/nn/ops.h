// The kernels layer code calls, on the CPU or ordered on a GPU's queue, behind one set of
// names: a layer whose forward and backward are a sequence of GEMMs and fused kernels (the
// recurrent layers) writes that sequence once, for both. `q` is the tensors' queue (a GPU's
// compute stream), nullptr on the CPU. The two backends take the same layouts and arguments
// (kernels/gpu/*.h mirror kernels/cpu/*.h).
#pragma once

#include <kernels/cpu/elementwise.h>
#include <kernels/cpu/gemm.h>
#include <kernels/cpu/recurrent.h>
#include <kernels/gpu/cast.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/recurrent.h>

#include <type_traits>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace paralab::nn {

struct Ops {
    void* q = nullptr;
    Device* device = nullptr;  // the tensors' device (its matmul precision, scratch memory)

    // Float GEMMs on a GPU set to bf16/fp16 (train.precision) multiply half-precision copies of
    // dense operands with fp32 accumulation into the fp32 C, as torch.autocast does for matmuls;
    // a strided operand (a recurrent step's rows) keeps the fp32 GEMM.
    template <class T>
    void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, T beta, T* C, int64_t ldc) const {
        if (!q) return kernels::cpu::gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        if constexpr (std::is_same_v<T, float>) {
            const MatmulPrecision p = device ? device->matmul_precision() : MatmulPrecision::fp32;
            if (p != MatmulPrecision::fp32 && lda == (ta ? M : K) && ldb == (tb ? K : N) && M > 0 &&
                N > 0 && K > 0)
                return half_gemm(p, ta, tb, M, N, K, alpha, A, B, beta, C, ldc);
        }
        kernels::gpu::gemm<T>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, q);
    }
    template <class T>
    void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, const T* B,
              T beta, T* C) const {
        gemm<T>(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
    }
    template <class T>
    void bias_broadcast_rows(int64_t rows, int64_t cols, const T* bias, T* y) const {
        if (q) kernels::gpu::bias_broadcast_rows<T>(rows, cols, bias, y, q);
        else kernels::cpu::bias_broadcast_rows<T>(rows, cols, bias, y);
    }
    template <class T>
    void bias_add_rows(int64_t rows, int64_t cols, const T* bias, T* y) const {
        if (q) kernels::gpu::bias_add_rows<T>(rows, cols, bias, y, q);
        else kernels::cpu::bias_add_rows<T>(rows, cols, bias, y);
    }
    template <class T>
    void column_sums_accumulate(int64_t rows, int64_t cols, const T* x, T* sums) const {
        if (q) kernels::gpu::column_sums_accumulate<T>(rows, cols, x, sums, q);
        else kernels::cpu::column_sums_accumulate<T>(rows, cols, x, sums);
    }
    template <class T>
    void strided_rows_copy(int64_t rows, int64_t cols, const T* src, int64_t ld_src, T* dst,
                           int64_t ld_dst) const {
        if (q) kernels::gpu::strided_rows_copy<T>(rows, cols, src, ld_src, dst, ld_dst, q);
        else kernels::cpu::strided_rows_copy<T>(rows, cols, src, ld_src, dst, ld_dst);
    }
    template <class T>
    void lstm_cell_forward(int64_t B, int64_t H, T* gates, int64_t ldg, const T* c_prev, T* c,
                           T* tanh_c, T* h, int64_t lds) const {
        if (q) kernels::gpu::lstm_cell_forward<T>(B, H, gates, ldg, c_prev, c, tanh_c, h, lds, q);
        else kernels::cpu::lstm_cell_forward<T>(B, H, gates, ldg, c_prev, c, tanh_c, h, lds);
    }
    template <class T>
    void lstm_cell_backward(int64_t B, int64_t H, const T* gates, int64_t ldg, const T* c_prev,
                            const T* tanh_c, const T* dh, int64_t lds, T* dc, T* dgates) const {
        if (q) kernels::gpu::lstm_cell_backward<T>(B, H, gates, ldg, c_prev, tanh_c, dh, lds, dc, dgates, q);
        else kernels::cpu::lstm_cell_backward<T>(B, H, gates, ldg, c_prev, tanh_c, dh, lds, dc, dgates);
    }
    template <class T>
    void gru_cell_forward(int64_t B, int64_t H, T* gates, int64_t ldg, const T* hh, const T* h_prev,
                          T* hn, T* h, int64_t lds) const {
        if (q) kernels::gpu::gru_cell_forward<T>(B, H, gates, ldg, hh, h_prev, hn, h, lds, q);
        else kernels::cpu::gru_cell_forward<T>(B, H, gates, ldg, hh, h_prev, hn, h, lds);
    }
    template <class T>
    void gru_cell_backward(int64_t B, int64_t H, const T* gates, int64_t ldg, const T* hn,
                           const T* h_prev, const T* dh, T* dh_prev, int64_t lds, T* dg_ih,
                           T* dg_hh) const {
        if (q)
            kernels::gpu::gru_cell_backward<T>(B, H, gates, ldg, hn, h_prev, dh, dh_prev, lds, dg_ih, dg_hh, q);
        else
            kernels::cpu::gru_cell_backward<T>(B, H, gates, ldg, hn, h_prev, dh, dh_prev, lds, dg_ih, dg_hh);
    }
    template <class T>
    void recurrent_weight_grad_accumulate(int64_t B, int64_t steps, int64_t G, int64_t H,
                                          const T* dgates, const T* h, T* dw) const {
        if (q) kernels::gpu::recurrent_weight_grad_accumulate<T>(B, steps, G, H, dgates, h, dw, q);
        else kernels::cpu::recurrent_weight_grad_accumulate<T>(B, steps, G, H, dgates, h, dw);
    }
    // The half-precision copies live in workspace tensors of the device (accounted), freed at
    // once: the GEMM that reads them is ordered on the same queue as any later reuse.
    void half_gemm(MatmulPrecision p, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                   const float* A, const float* B, float beta, float* C, int64_t ldc) const {
        namespace kg = kernels::gpu;
        const auto half_copy = [&](const float* x, int64_t n) {
            Tensor t = Tensor::empty(Shape{(n + 1) / 2}, DType::f32, *device, MemCategory::workspace);
            auto* h = static_cast<uint16_t*>(t.raw());
            if (p == MatmulPrecision::bf16) kg::cast_f32_to_bf16(n, x, h, q);
            else kg::cast_f32_to_f16(n, x, h, q);
            return t;
        };
        const Tensor a = half_copy(A, M * K), b = half_copy(B, K * N);
        kg::gemm_half(p == MatmulPrecision::bf16 ? kg::HalfType::bf16 : kg::HalfType::fp16, ta, tb, M, N, K,
                      alpha, static_cast<const uint16_t*>(a.raw()), ta ? M : K,
                      static_cast<const uint16_t*>(b.raw()), tb ? K : N, beta, C, ldc, q);
    }

    // y = a + b, elementwise (the LSTM's two biases, a residual's two paths). On a GPU: y = a,
    // then b added as the one row of a [1, n] bias add: the same IEEE sum as the host loop.
    template <class T>
    void add(int64_t n, const T* a, const T* b, T* y) const {
        if (q) {
            kernels::gpu::bias_broadcast_rows<T>(1, n, a, y, q);
            kernels::gpu::bias_add_rows<T>(1, n, b, y, q);
        } else {
            for (int64_t k = 0; k < n; ++k) y[k] = a[k] + b[k];
        }
    }
};

inline Ops ops_for(const Tensor& t) { return Ops{t.queue(), t.defined() ? &t.device() : nullptr}; }

}  // namespace paralab::nn
