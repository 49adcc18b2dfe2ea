// Napkin math for the CUDA kernels: each kernel's time, from CUDA events
// around many launches on one stream, next to the bandwidth it reached (bytes it must move /
// time) or, for GEMMs, its GFLOP/s. Compare the GB/s with the device's memory bandwidth
// (H100 SXM: ~3.35 TB/s HBM3) to see how far each kernel is from its bound. Not a test: run
// `build/bench/bench_gpu_kernels [--size N] [--gemm-sweep]` on a GPU machine. Without a GPU it says so.
#include <kernels/gpu/cast.h>
#include <kernels/gpu/conv.h>
#include <kernels/gpu/dropout.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/gemm.h>
#include <kernels/gpu/info.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/norm.h>
#include <kernels/gpu/optim.h>
#include <kernels/gpu/pool.h>
#include <kernels/gpu/reduce.h>
#include <kernels/gpu/softmax.h>
#include <kernels/gpu/stream.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kg = paralab::kernels::gpu;

namespace {

// Device memory for the benchmark, filled with small values (no inf/NaN slow paths).
struct Buffer {
    void* ptr = nullptr;
    explicit Buffer(size_t bytes) {
        ptr = kg::device_allocate(0, bytes);
        if (!ptr) throw std::runtime_error("bench_gpu_kernels: GPU 0 is out of memory");
        kg::fill_bytes_async(ptr, 0x3c, bytes, nullptr);  // 0x3c3c3c3c: 0.0115f
    }
    ~Buffer() { kg::device_free(0, ptr); }
    template <class T>
    T* as() const { return static_cast<T*>(ptr); }
};

// Milliseconds per call of `launch`, from events around `iters` calls after a warm-up.
float time_ms(void* stream, const std::function<void()>& launch, int iters = 50) {
    for (int i = 0; i < 3; ++i) launch();
    void* begin = kg::event_create(0);
    void* end = kg::event_create(0);
    kg::event_record(begin, stream);
    for (int i = 0; i < iters; ++i) launch();
    kg::event_record(end, stream);
    kg::event_synchronize(end);
    const float ms = kg::event_elapsed_ms(begin, end) / static_cast<float>(iters);
    kg::event_destroy(begin);
    kg::event_destroy(end);
    return ms;
}

void report_bandwidth(const char* name, float ms, double bytes) {
    std::printf("%-34s %9.4f ms  %8.1f GB/s\n", name, ms, bytes / (ms * 1e6));
}

void report_flops(const char* name, float ms, double flops) {
    std::printf("%-34s %9.4f ms  %8.1f GFLOP/s\n", name, ms, flops / (ms * 1e6));
}

// `--gemm-sweep`: the planner's calibration figures (docs/planner.md): cuBLAS GEMM rates by size
// and precision, square and in the shapes of a GPT-2-small step, and the device-to-device copy
// bandwidth; one aligned line per case and a JSON object on the last line.
void gemm_sweep(void* s, const Buffer& a, const Buffer& b, const Buffer& c, const Buffer& d, const Buffer& e,
                int64_t n) {
    struct Shape {
        const char* what;
        int64_t M, N, K;
    };
    std::vector<Shape> shapes;
    for (int64_t m = 256; m <= 8192 && m * m <= n; m *= 2) shapes.push_back({"square", m, m, m});
    // GPT-2 small (D 768, ffn 3072, batch 8 x T 256 = 2048 tokens): qkv, projection, ffn in and
    // out, and one head's scores (T x T over Dh 64).
    shapes.push_back({"gpt2 qkv", 2048, 2304, 768});
    shapes.push_back({"gpt2 proj", 2048, 768, 768});
    shapes.push_back({"gpt2 ffn1", 2048, 3072, 768});
    shapes.push_back({"gpt2 ffn2", 2048, 768, 3072});
    shapes.push_back({"gpt2 scores", 256, 256, 64});
    std::string json = "{\"gemm\": [";
    bool first = true;
    std::printf("%-12s %6s %6s %6s %6s %10s %12s\n", "shape", "M", "N", "K", "math", "ms", "GFLOP/s");
    for (const Shape& sh : shapes) {
        const double flops = 2.0 * static_cast<double>(sh.M) * static_cast<double>(sh.N) * static_cast<double>(sh.K);
        const int iters = flops > 1e11 ? 10 : flops > 1e9 ? 50 : 200;
        for (const char* math : {"fp32", "tf32", "bf16"}) {
            float ms = 0;
            if (std::strcmp(math, "bf16") == 0) {
                ms = time_ms(s, [&] { kg::gemm_half(kg::HalfType::bf16, false, false, sh.M, sh.N, sh.K, 1.0f, d.as<uint16_t>(), sh.K, e.as<uint16_t>(), sh.N, 0.0f, c.as<float>(), sh.N, s); }, iters);
            } else {
                const auto mode = std::strcmp(math, "tf32") == 0 ? kg::GemmMath::tf32 : kg::GemmMath::fp32;
                ms = time_ms(s, [&] { kg::gemm<float>(false, false, sh.M, sh.N, sh.K, 1.0f, a.as<float>(), b.as<float>(), 0.0f, c.as<float>(), s, mode); }, iters);
            }
            const double gflops = flops / (static_cast<double>(ms) * 1e6);
            std::printf("%-12s %6lld %6lld %6lld %6s %10.4f %12.1f\n", sh.what, static_cast<long long>(sh.M),
                        static_cast<long long>(sh.N), static_cast<long long>(sh.K), math, ms, gflops);
            char row[256];
            std::snprintf(row, sizeof row, "%s{\"shape\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, \"math\": \"%s\", \"gflops\": %.1f}",
                          first ? "" : ", ", sh.what, static_cast<long long>(sh.M), static_cast<long long>(sh.N),
                          static_cast<long long>(sh.K), math, gflops);
            json += row;
            first = false;
        }
    }
    json += "], \"copy\": [";
    first = true;
    for (int64_t bytes = int64_t{1} << 20; bytes <= 4 * n; bytes *= 4) {
        const float ms = time_ms(s, [&] { kg::copy_device_to_device_async(b.ptr, a.ptr, static_cast<size_t>(bytes), s); }, 20);
        const double gbps = 2.0 * static_cast<double>(bytes) / (static_cast<double>(ms) * 1e6);  // read + write
        std::printf("copy %10lld bytes %10.4f ms %10.1f GB/s (read + write)\n", static_cast<long long>(bytes), ms, gbps);
        char row[128];
        std::snprintf(row, sizeof row, "%s{\"bytes\": %lld, \"gbps_read_write\": %.1f}", first ? "" : ", ",
                      static_cast<long long>(bytes), gbps);
        json += row;
        first = false;
    }
    json += "]}";
    std::printf("%s\n", json.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    int64_t n = int64_t{1} << 26;  // 64 Mi elements: 256 MB per fp32 array
    bool sweep = false;
    for (int i = 1; i < argc; ++i) {
        if (i + 1 < argc && std::strcmp(argv[i], "--size") == 0) n = std::atoll(argv[i + 1]);
        if (std::strcmp(argv[i], "--gemm-sweep") == 0) sweep = true;
    }
    if (kg::device_count() == 0) {
        std::printf("no CUDA device: nothing to benchmark\n");
        return 0;
    }
    try {
        kg::set_device(0);
        const auto info = kg::device_info(0);
        std::printf("%s, %d SMs, %.1f GiB; arrays of %lld elements\n", info.name.c_str(), info.multiprocessors,
                    static_cast<double>(info.memory_bytes) / (1 << 30), static_cast<long long>(n));
        void* s = kg::stream_create(0);
        const double f4 = 4.0 * static_cast<double>(n);  // bytes of one fp32 array
        Buffer a(n * 4), b(n * 4), c(n * 4), d(n * 4), e(n * 4);
        Buffer result(8), scratch(kg::kReduceScratch * 8);
        if (sweep) {
            gemm_sweep(s, a, b, c, d, e, n);
            kg::release_gemm_handles(s);
            kg::stream_destroy(s);
            return 0;
        }

        report_bandwidth("relu_forward f32", time_ms(s, [&] { kg::relu_forward<float>(n, a.as<float>(), b.as<float>(), s); }), 2 * f4);
        report_bandwidth("gelu_forward f32", time_ms(s, [&] { kg::gelu_forward<float>(n, a.as<float>(), b.as<float>(), s); }), 2 * f4);
        report_bandwidth("gelu_backward f32", time_ms(s, [&] { kg::gelu_backward<float>(n, a.as<float>(), b.as<float>(), c.as<float>(), s); }), 3 * f4);
        report_bandwidth("multiply_elementwise f32", time_ms(s, [&] { kg::multiply_elementwise<float>(n, a.as<float>(), b.as<float>(), c.as<float>(), s); }), 3 * f4);
        report_bandwidth("dropout_forward f32 p=0.1", time_ms(s, [&] { kg::dropout_forward<float>(n, 42, 0, 0.1, a.as<float>(), b.as<float>(), c.as<float>(), s); }), 3 * f4);
        report_bandwidth("sum_of_squares f32", time_ms(s, [&] { kg::sum_of_squares<float>(n, a.as<float>(), result.as<double>(), scratch.as<double>(), s); }), f4);
        report_bandwidth("cast_f32_to_bf16", time_ms(s, [&] { kg::cast_f32_to_bf16(n, a.as<float>(), b.as<uint16_t>(), s); }), 1.5 * f4);
        report_bandwidth("adamw_update f32 (1 tensor)",
                         time_ms(s, [&] { kg::adamw_update<float>(n, a.as<float>(), b.as<float>(), c.as<float>(), d.as<float>(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 10, s); }),
                         7 * f4);
        {  // the same parameters as 200 tensors in one multi-tensor launch sequence
            const int64_t count = 200, each = n / count;
            std::vector<float*> p(count), g(count), m(count), v(count);
            std::vector<int64_t> sizes(count, each);
            for (int64_t k = 0; k < count; ++k) {
                p[k] = a.as<float>() + k * each;
                g[k] = b.as<float>() + k * each;
                m[k] = c.as<float>() + k * each;
                v[k] = d.as<float>() + k * each;
            }
            report_bandwidth("adamw_update_multi f32 (200)",
                             time_ms(s, [&] { kg::adamw_update_multi<float>(count, p.data(), g.data(), m.data(), v.data(), sizes.data(), 1e-3, 0.9, 0.999, 1e-8, 0.01, 10, s); }),
                             7.0 * 4.0 * static_cast<double>(count * each));
        }
        if (n >= 2 * 50257) {  // language-model logits: [rows, 50257]
            const int64_t classes = 50257, rows = n / classes / 2;
            Buffer targets(rows * 8), row_loss(rows * 8);
            kg::fill_bytes_async(targets.ptr, 0, static_cast<size_t>(rows * 8), s);
            report_bandwidth("softmax_cross_entropy_forward f32",
                             time_ms(s, [&] { kg::softmax_cross_entropy_forward<float>(rows, classes, a.as<float>(), targets.as<int64_t>(), b.as<float>(), row_loss.as<double>(), result.as<double>(), s); }),
                             3.0 * 4.0 * static_cast<double>(rows * classes));
        }
        {  // layer norm over rows of 1024
            const int64_t D = 1024, rows = n / D;
            report_bandwidth("layernorm_forward f32 D=1024",
                             time_ms(s, [&] { kg::layernorm_forward<float>(rows, D, 1e-5, a.as<float>(), c.as<float>(), d.as<float>(), b.as<float>(), e.as<float>(), e.as<float>() + rows, s); }),
                             2 * f4);
            report_bandwidth("column_sums_accumulate f32 D=1024",
                             time_ms(s, [&] { kg::column_sums_accumulate<float>(rows, D, a.as<float>(), b.as<float>(), s); }), f4);
        }
        {  // 2x2 max pool over 28x28 planes, its gather backward; batch norm's sums over [N, 16, 196]
            const paralab::kernels::cpu::Pool2dGeometry g{n / (28 * 28), 28, 28, 2, 2};
            const double out = static_cast<double>(g.planes * 14 * 14);
            report_bandwidth("maxpool2d_forward f32 2x2",
                             time_ms(s, [&] { kg::maxpool2d_forward<float>(g, a.as<float>(), b.as<float>(), e.as<int32_t>(), s); }),
                             f4 + 8.0 * out);
            report_bandwidth("maxpool2d_backward f32 2x2",
                             time_ms(s, [&] { kg::maxpool2d_backward<float>(g, e.as<int32_t>(), b.as<float>(), c.as<float>(), s); }),
                             f4 + 8.0 * out);
            const int64_t C = 16, S = 196, N = n / (C * S);
            Buffer sums(2 * C * 8);
            report_bandwidth("batchnorm_channel_sums f32 S=196",
                             time_ms(s, [&] { kg::batchnorm_channel_sums<float>(N, C, S, a.as<float>(), sums.as<double>(), sums.as<double>() + C, s); }),
                             4.0 * static_cast<double>(N * C * S));
        }
        if (kg::cudnn_available() && n >= (int64_t{1} << 20)) {  // LeNet's convolutions, batch 64, cuDNN fp32 (FMA math)
            const paralab::kernels::cpu::Conv2dGeometry convs[2] = {{1, 28, 28, 5, 1, 2}, {16, 14, 14, 5, 1, 2}};
            const int64_t outs[2] = {16, 32}, N = 64;
            const char* names[2][2] = {{"conv2d fwd f32 LeNet conv1 N=64", "conv2d bwd f32 LeNet conv1 N=64"},
                                       {"conv2d fwd f32 LeNet conv2 N=64", "conv2d bwd f32 LeNet conv2 N=64"}};
            for (int i = 0; i < 2; ++i) {
                const auto& g = convs[i];
                const int64_t K = outs[i], weights = K * g.col_rows();
                const kg::CudnnConv2dPlan plan(0, g, N, K, true, false);
                Buffer ws(std::max<size_t>({plan.forward_workspace_bytes(), plan.backward_workspace_bytes(), 1}));
                float* w = b.as<float>();
                float* bias = w + weights;
                float* dw = c.as<float>();
                float* db = dw + weights;
                const double flops = 2.0 * static_cast<double>(N * K * g.out_height() * g.out_width() * g.col_rows());
                report_flops(names[i][0], time_ms(s, [&] { plan.forward(a.ptr, w, bias, d.ptr, ws.ptr, s); }), flops);
                report_flops(names[i][1],  // dx and dw: twice the forward's products
                             time_ms(s, [&] { plan.backward(a.ptr, d.ptr, w, e.ptr, dw, db, ws.ptr, s); }), 2 * flops);
            }
        }
        if (n >= 4096 * 4096) {  // GEMMs: 4096^3, operands of 64 MB
            const int64_t M = 4096;
            const double flops = 2.0 * M * M * M;
            report_flops("gemm fp32 4096^3", time_ms(s, [&] { kg::gemm<float>(false, false, M, M, M, 1.0f, a.as<float>(), b.as<float>(), 0.0f, c.as<float>(), s, kg::GemmMath::fp32); }, 10), flops);
            report_flops("gemm tf32 4096^3", time_ms(s, [&] { kg::gemm<float>(false, false, M, M, M, 1.0f, a.as<float>(), b.as<float>(), 0.0f, c.as<float>(), s, kg::GemmMath::tf32); }, 10), flops);
            report_flops("gemm bf16 -> f32 4096^3",
                         time_ms(s, [&] { kg::gemm_half(kg::HalfType::bf16, false, false, M, M, M, 1.0f, d.as<uint16_t>(), M, e.as<uint16_t>(), M, 0.0f, c.as<float>(), M, s); }, 10),
                         flops);
        }
        kg::release_gemm_handles(s);
        kg::stream_destroy(s);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_gpu_kernels: %s\n", e.what());
        return 1;
    }
    return 0;
}
