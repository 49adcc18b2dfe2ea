// Today's models (docs/experiment-format.md, "Today's models"): rmsnorm, grouped-query attention,
// rotary positions, the SwiGLU MLP, blocks without bias and the tied output layer. Their
// gradients against finite differences; the new kernels against plain references and against
// the properties that define them (grouped-query attention is attention with repeated key/value
// weights, RoPE scores depend only on relative positions); parameter counts, FLOPs and memory;
// the weights' names; and the errors a file can cause, at their JSON paths.
#include <gtest/gtest.h>
#include <kernels/cpu/rmsnorm.h>
#include <kernels/cpu/rope.h>
#include <kernels/cpu/swiglu.h>

#include <cmath>
#include <complex>
#include <filesystem>
#include <memory>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/device/device.h"
#include "engine/io/weights.h"
#include "engine/nn/attention.h"
#include "engine/nn/model.h"
#include "engine/nn/norm.h"
#include "engine/nn/swiglu.h"
#include "engine/run/experiment_file.h"
#include "engine/util/rng.h"
#include "file_errors.h"
#include "layer_fixture.h"
#include "gradcheck.h"

using namespace paralab;
using nn::Mode;
namespace pt = paralab::testing;
using pt::GradCase;
using pt::make;
using json = nlohmann::json;

namespace {

nn::AttentionOptions attn(int64_t heads, int64_t kv_heads, bool rope, bool bias, double dropout = 0.0,
                          double theta = 10000.0) {
    return nn::AttentionOptions{heads, kv_heads, true, dropout, rope, theta, bias};
}

// ---- gradients ------------------------------------------------------------------------------

class LlamaGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(LlamaGrad, MatchesFiniteDifferences) { pt::check_layer_gradients(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Grad, LlamaGrad,
    ::testing::Values(
        GradCase{"rmsnorm_4x6", make<nn::RMSNorm>(1e-5, false), Shape{4, 6}},
        GradCase{"rmsnorm_bias", make<nn::RMSNorm>(1e-5, true), Shape{3, 5}},
        GradCase{"layernorm_without_bias", make<nn::LayerNorm>(1e-5, false), Shape{3, 5}},
        GradCase{"swiglu_ffn6", make<nn::SwiGLU>(int64_t{6}, true), Shape{3, 4}},
        GradCase{"swiglu_without_bias", make<nn::SwiGLU>(int64_t{5}, false), Shape{2, 3}},
        GradCase{"attention_gqa_H4_KV2", make<nn::Attention>(attn(4, 2, false, true)), Shape{5, 8}},
        GradCase{"attention_multi_query", make<nn::Attention>(attn(4, 1, false, true)), Shape{4, 8}},
        GradCase{"attention_rope", make<nn::Attention>(attn(2, 0, true, true)), Shape{5, 8}},
        // A small theta turns the pairs fast: every angle far from 0 at these positions.
        GradCase{"attention_rope_gqa_without_bias", make<nn::Attention>(attn(4, 2, true, false, 0.0, 3.0)),
                 Shape{6, 16}},
        GradCase{"attention_rope_T40", make<nn::Attention>(attn(2, 1, true, true)), Shape{40, 4}, 1},
        GradCase{"block_llama", make<nn::TransformerBlock>(attn(4, 2, true, false), nn::BlockOptions{12, true, true}),
                 Shape{4, 8}},
        GradCase{"block_llama_dropout",
                 make<nn::TransformerBlock>(attn(2, 1, true, false, 0.2), nn::BlockOptions{8, true, true}), Shape{3, 4}},
        GradCase{"block_swiglu_layernorm", make<nn::TransformerBlock>(attn(2, 0, false, true), nn::BlockOptions{8, false, true}),
                 Shape{3, 4}},
        GradCase{"block_gelu_without_bias",
                 make<nn::TransformerBlock>(attn(2, 2, false, false), nn::BlockOptions{8, false, false}), Shape{3, 4}}),
    pt::GradCaseName{});

// ---- kernels against plain references -----------------------------------------------------

std::vector<double> normals(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<double> v(n);
    for (auto& x : v) x = rng.normal();
    return v;
}

// RMSNorm as its definition, in double.
TEST(LlamaKernels, RmsnormIsItsDefinition) {
    const int64_t rows = 3, D = 7;
    const auto x = normals(rows * D, 1), gamma = normals(D, 2), beta = normals(D, 3);
    std::vector<double> y(x.size()), rstd(rows);
    kernels::cpu::rmsnorm_forward<double>(rows, D, 1e-5, x.data(), gamma.data(), beta.data(), y.data(), rstd.data());
    for (int64_t r = 0; r < rows; ++r) {
        double ms = 0;
        for (int64_t i = 0; i < D; ++i) ms += x[r * D + i] * x[r * D + i] / D;
        for (int64_t i = 0; i < D; ++i)
            EXPECT_NEAR(y[r * D + i], x[r * D + i] / std::sqrt(ms + 1e-5) * gamma[i] + beta[i], 1e-12);
    }
}

// SwiGLU as its definition, in double.
TEST(LlamaKernels, SwigluIsSiluOfTheGateTimesUp) {
    const auto g = normals(9, 4), u = normals(9, 5);
    std::vector<double> h(9);
    kernels::cpu::swiglu_forward<double>(9, g.data(), u.data(), h.data());
    for (size_t i = 0; i < 9; ++i) EXPECT_NEAR(h[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-14);
}

struct Rope {
    int64_t B, T, H, KV, Dh;
    bool rope;
};
void PrintTo(const Rope& a, std::ostream* out) {
    *out << "B" << a.B << " T" << a.T << " H" << a.H << " KV" << a.KV << " Dh" << a.Dh << (a.rope ? " rope" : "");
}

// The expansion against the textbook: each query head's q, and the key/value head it reads,
// with the pairs (i, i + Dh/2) turned as the complex number x_i + i x_{i+Dh/2} times
// exp(i t theta^(-2i/Dh)); v copied as it is.
class RopeKernels : public ::testing::TestWithParam<Rope> {};
TEST_P(RopeKernels, ExpansionIsTheComplexRotationOfTheHeadsItReads) {
    const Rope a = GetParam();
    const double theta = 10000.0;
    const int64_t wc = (a.H + 2 * a.KV) * a.Dh, wf = 3 * a.H * a.Dh, half = a.Dh / 2, group = a.H / a.KV;
    const auto compact = normals(static_cast<size_t>(a.B * a.T * wc), 6);
    std::vector<double> full(static_cast<size_t>(a.B * a.T * wf), -1.0);
    kernels::cpu::qkv_expand_rope<double>(a.B, a.T, a.H, a.KV, a.Dh, a.rope, theta, compact.data(), full.data());
    for (int64_t b = 0; b < a.B; ++b)
        for (int64_t t = 0; t < a.T; ++t) {
            const double* src = compact.data() + (b * a.T + t) * wc;
            const double* dst = full.data() + (b * a.T + t) * wf;
            for (int64_t h = 0; h < a.H; ++h) {
                const int64_t g = h / group;
                const double* heads_in[] = {src + h * a.Dh, src + (a.H + g) * a.Dh, src + (a.H + a.KV + g) * a.Dh};
                for (int part = 0; part < 3; ++part) {
                    const double* in = heads_in[part];
                    const double* out = dst + (part * a.H + h) * a.Dh;
                    for (int64_t i = 0; i < (part < 2 && a.rope ? half : a.Dh); ++i) {
                        if (part == 2 || !a.rope) {
                            ASSERT_EQ(out[i], in[i]);
                            continue;
                        }
                        const double angle = static_cast<double>(t) * std::pow(theta, -2.0 * i / a.Dh);
                        const std::complex<double> z =
                            std::complex<double>(in[i], in[i + half]) * std::polar(1.0, angle);
                        ASSERT_NEAR(out[i], z.real(), 1e-12) << "b " << b << " t " << t << " h " << h;
                        ASSERT_NEAR(out[i + half], z.imag(), 1e-12) << "b " << b << " t " << t << " h " << h;
                    }
                }
            }
        }
}

// The backward is the expansion's transpose: <dfull, expand(c)> = <backward(dfull), c> for any
// c and dfull (the key/value gradients summed over their query heads, the rotation undone).
TEST_P(RopeKernels, BackwardIsTheTransposeOfTheExpansion) {
    const Rope a = GetParam();
    const int64_t wc = (a.H + 2 * a.KV) * a.Dh, wf = 3 * a.H * a.Dh;
    const auto c = normals(static_cast<size_t>(a.B * a.T * wc), 7);
    const auto dfull = normals(static_cast<size_t>(a.B * a.T * wf), 8);
    std::vector<double> full(dfull.size()), dc(c.size(), -1.0);
    kernels::cpu::qkv_expand_rope<double>(a.B, a.T, a.H, a.KV, a.Dh, a.rope, 500.0, c.data(), full.data());
    kernels::cpu::qkv_expand_rope_backward<double>(a.B, a.T, a.H, a.KV, a.Dh, a.rope, 500.0, dfull.data(), dc.data());
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < full.size(); ++i) lhs += dfull[i] * full[i];
    for (size_t i = 0; i < c.size(); ++i) rhs += dc[i] * c[i];
    EXPECT_NEAR(lhs, rhs, 1e-9 * std::max(1.0, std::abs(lhs)));
}
INSTANTIATE_TEST_SUITE_P(Shapes, RopeKernels,
                         ::testing::Values(Rope{2, 5, 4, 2, 6, true}, Rope{1, 7, 4, 1, 4, true},
                                           Rope{2, 3, 3, 3, 8, true}, Rope{2, 4, 6, 2, 3, false},
                                           Rope{1, 70, 2, 2, 16, true}),
                         [](const auto& info) {
                             const Rope& a = info.param;
                             return "B" + std::to_string(a.B) + "_T" + std::to_string(a.T) + "_H" +
                                    std::to_string(a.H) + "_KV" + std::to_string(a.KV) + "_Dh" +
                                    std::to_string(a.Dh) + (a.rope ? "_rope" : "_plain");
                         });

// Rows at given positions: each row rotated as the row at that position of the whole sequence
// (a context-parallel device's zig-zag rows), forward and backward.
TEST(LlamaKernels, RotationAtPositionsIsTheWholeSequencesRowsThere) {
    const int64_t B = 2, T = 12, H = 4, KV = 2, Dh = 6, wc = (H + 2 * KV) * Dh, wf = 3 * H * Dh;
    const auto compact = normals(static_cast<size_t>(B * T * wc), 13), dfull = normals(static_cast<size_t>(B * T * wf), 14);
    std::vector<double> full(dfull.size()), dcompact(compact.size());
    kernels::cpu::qkv_expand_rope<double>(B, T, H, KV, Dh, true, 10000.0, compact.data(), full.data());
    kernels::cpu::qkv_expand_rope_backward<double>(B, T, H, KV, Dh, true, 10000.0, dfull.data(), dcompact.data());
    const std::vector<int64_t> at{1, 10, 2, 9};  // what device 1 of cp 3 holds of T = 12
    EXPECT_EQ(nn::context_positions(T, 1, 3, "cp"), (std::vector<int64_t>{2, 3, 8, 9}));
    const int64_t n = static_cast<int64_t>(at.size());
    std::vector<double> c(static_cast<size_t>(B * n * wc)), d(static_cast<size_t>(B * n * wf));
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < n; ++t) {
            std::copy_n(compact.begin() + (b * T + at[static_cast<size_t>(t)]) * wc, wc, c.begin() + (b * n + t) * wc);
            std::copy_n(dfull.begin() + (b * T + at[static_cast<size_t>(t)]) * wf, wf, d.begin() + (b * n + t) * wf);
        }
    std::vector<double> f(d.size()), dc(c.size());
    kernels::cpu::qkv_expand_rope_at<double>(B, n, H, KV, Dh, true, 10000.0, at.data(), c.data(), f.data());
    kernels::cpu::qkv_expand_rope_backward_at<double>(B, n, H, KV, Dh, true, 10000.0, at.data(), d.data(), dc.data());
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < n; ++t) {
            const int64_t whole = b * T + at[static_cast<size_t>(t)];
            for (int64_t i = 0; i < wf; ++i)
                ASSERT_EQ(f[static_cast<size_t>((b * n + t) * wf + i)], full[static_cast<size_t>(whole * wf + i)]);
            for (int64_t i = 0; i < wc; ++i)
                ASSERT_EQ(dc[static_cast<size_t>((b * n + t) * wc + i)], dcompact[static_cast<size_t>(whole * wc + i)]);
        }
}

// RoPE's point: the score of a rotated q at position t with a rotated k at position s depends
// on t - s only. The same q at every position and the same k at every position: the products
// along each diagonal agree, and those of different offsets differ.
TEST(LlamaKernels, RotatedScoresDependOnlyOnTheRelativePosition) {
    const int64_t T = 9, Dh = 8;
    const auto q = normals(Dh, 9), k = normals(Dh, 10);
    std::vector<double> compact(static_cast<size_t>(T * 3 * Dh)), full(compact.size());
    for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < Dh; ++i) {
            compact[static_cast<size_t>(t * 3 * Dh + i)] = q[static_cast<size_t>(i)];
            compact[static_cast<size_t>(t * 3 * Dh + Dh + i)] = k[static_cast<size_t>(i)];
        }
    kernels::cpu::qkv_expand_rope<double>(1, T, 1, 1, Dh, true, 10000.0, compact.data(), full.data());
    const auto score = [&](int64_t t, int64_t s) {
        double dot = 0;
        for (int64_t i = 0; i < Dh; ++i) dot += full[static_cast<size_t>(t * 3 * Dh + i)] * full[static_cast<size_t>(s * 3 * Dh + Dh + i)];
        return dot;
    };
    for (int64_t offset = 0; offset < 4; ++offset)
        for (int64_t s = 0; s + offset < T; ++s) EXPECT_NEAR(score(s + offset, s), score(offset, 0), 1e-12);
    EXPECT_GT(std::abs(score(1, 0) - score(3, 0)), 1e-3);
}

// ---- layers ---------------------------------------------------------------------------------

class LlamaTest : public paralab::testing::LayerFixture {};

// Grouped-query attention is multi-head attention whose heads of a group have equal keys and
// values: copy the q rows, and each key/value head's rows to every query head of its group.
TEST_F(LlamaTest, GroupedQueryAttentionIsAttentionWithRepeatedKeyValueWeights) {
    const int64_t H = 4, KV = 2, D = 16, hd = D / H, T = 6;
    for (const bool rope : {false, true}) {
        auto gqa = built(std::make_unique<nn::Attention>(attn(H, KV, rope, true)), Shape{T, D});
        auto mha = built(std::make_unique<nn::Attention>(attn(H, H, rope, true)), Shape{T, D});
        const auto g = gqa->parameters(), m = mha->parameters();
        ASSERT_EQ(g.size(), 4u);
        ASSERT_EQ(g[0]->value.shape(), (Shape{(H + 2 * KV) * hd, D}));
        ASSERT_EQ(m[0]->value.shape(), (Shape{3 * D, D}));
        // Row r of the full qkv (weight and bias) from row src(r) of the grouped one.
        const auto src = [&](int64_t r) {
            const int64_t part = r / D, h = (r % D) / hd, i = r % hd;
            return part == 0 ? r : part == 1 ? (H + h / (H / KV)) * hd + i : (H + KV + h / (H / KV)) * hd + i;
        };
        for (int64_t r = 0; r < 3 * D; ++r) {
            for (int64_t c = 0; c < D; ++c) m[0]->value.data<double>()[r * D + c] = g[0]->value.data<double>()[src(r) * D + c];
            m[1]->value.data<double>()[r] = g[1]->value.data<double>()[src(r)];
        }
        m[2]->value.copy_from(g[2]->value);
        m[3]->value.copy_from(g[3]->value);
        const Tensor x = random(Shape{2, T, D}, 12);
        const Tensor a = gqa->forward(x, Mode::eval).clone(MemCategory::activations);
        const Tensor b = mha->forward(x, Mode::eval);
        for (int64_t k = 0; k < a.numel(); ++k) ASSERT_NEAR(a.data<double>()[k], b.data<double>()[k], 1e-12) << k;
    }
}

TEST_F(LlamaTest, ParameterCountsFlopsAndActivationsAreTheFormulas) {
    const int64_t T = 64, D = 128, H = 8, KV = 2, hd = D / H, ffn = 384;
    auto a = built(std::make_unique<nn::Attention>(attn(H, KV, true, false)), Shape{T, D});
    EXPECT_EQ(a->parameter_count(), D * (H + 2 * KV) * hd + D * D);
    auto ab = built(std::make_unique<nn::Attention>(attn(H, KV, true, true)), Shape{T, D});
    EXPECT_EQ(ab->parameter_count(), D * (H + 2 * KV) * hd + (H + 2 * KV) * hd + D * D + D);
    // qkv and proj, q k^T and the product with V over all heads, the softmax, and RoPE's 3 per
    // rotated number of the H + KV q and k heads.
    EXPECT_EQ(a->flops_per_sample(), T * (H + 2 * KV) * hd * 2 * D + T * D * 2 * D + 4 * T * T * D + 5 * H * T * T +
                                         3 * T * (H + KV) * hd);
    // The expanded q, k, v [T, 3D] and the fused kernel's log-sum-exp [H, T], plus the
    // projections' inputs; the materialized kernel keeps the probabilities [H, T, T] instead.
    EXPECT_EQ(a->activations_per_sample(), 3 * T * D + H * T + T * D + T * D);
    nn::AttentionOptions materialized = attn(H, KV, true, false);
    materialized.kernel = nn::AttentionKernel::materialized;
    auto m = built(std::make_unique<nn::Attention>(materialized), Shape{T, D});
    EXPECT_EQ(m->activations_per_sample(), 3 * T * D + H * T * T + T * D + T * D);
    auto block = built(std::make_unique<nn::TransformerBlock>(attn(H, KV, true, false), nn::BlockOptions{ffn, true, true}),
                       Shape{T, D});
    const int64_t per_block = D + (D * (H + 2 * KV) * hd + D * D) + D + 3 * D * ffn;
    EXPECT_EQ(per_block, 188'672);
    EXPECT_EQ(block->parameter_count(), per_block);
    auto swiglu = built(std::make_unique<nn::SwiGLU>(ffn, false), Shape{T, D});
    EXPECT_EQ(swiglu->flops_per_sample(), 3 * T * ffn * 2 * D + 2 * T * ffn);
    // x once (gate and up keep the same tensor), gate's and up's outputs, down's input.
    EXPECT_EQ(swiglu->activations_per_sample(), T * D + 3 * T * ffn);
    auto rms = built(std::make_unique<nn::RMSNorm>(1e-5, false), Shape{T, D});
    EXPECT_EQ(rms->parameter_count(), D);
    EXPECT_EQ(rms->flops_per_sample(), 4 * T * D);
    for (double v : rms->parameters()[0]->value.span<double>()) EXPECT_EQ(v, 1.0);
}

// The model of resources/examples/llama-char.paralab.json counted by hand: embedding 256 * 128,
// 4 blocks of (128 + 128 * 192 + 128 * 128 + 128 + 3 * 128 * 384) = 188,672, the final rmsnorm
// 128, the output layer 128 * 256 (no bias): 820,352; tied to the embedding, 787,584.
TEST(LlamaModel, TheExampleHasTheHandCountedParametersAndNamesAsPytorch) {
    auto e = run::load_experiment(std::string(PARALAB_EXAMPLES_DIR) + "/llama-char.paralab.json");
    const auto s = nn::summarize(e.layers, *e.input, e.loss);
    EXPECT_EQ(s.parameters, 256 * 128 + 4 * 188'672 + 128 + 128 * 256);
    EXPECT_EQ(s.parameters, 820'352);
    // The output layer's FLOPs are the same tied: only its weight is another's.
    const int64_t flops = s.flops_per_sample;
    e.layers.back().tie_embeddings = true;
    const auto tied = nn::summarize(e.layers, *e.input, e.loss);
    EXPECT_EQ(tied.parameters, 787'584);
    EXPECT_EQ(tied.flops_per_sample, flops);
    e.layers.back().tie_embeddings = false;
    auto dev = make_cpu_device(0);
    nn::Model m(e.layers, *e.input, e.loss, DType::f32, *dev);
    const auto names = io::parameter_names(m);
    const std::vector<std::string> block0{
        "layers.1.layers.0.layers.0.weight",       "layers.1.layers.0.layers.1.qkv.weight",
        "layers.1.layers.0.layers.1.proj.weight",  "layers.1.layers.1.layers.0.weight",
        "layers.1.layers.1.layers.1.gate.weight",  "layers.1.layers.1.layers.1.up.weight",
        "layers.1.layers.1.layers.1.down.weight"};
    ASSERT_EQ(names.size(), 1 + 4 * block0.size() + 2);
    EXPECT_EQ(names.front(), "layers.0.weight");
    for (size_t k = 0; k < block0.size(); ++k) EXPECT_EQ(names[1 + k], block0[k]);
    EXPECT_EQ(names[names.size() - 2], "layers.5.weight");  // the final rmsnorm
    EXPECT_EQ(names.back(), "layers.6.weight");             // the output layer, [256, 128]
    EXPECT_EQ(m.parameters()[2]->value.shape(), (Shape{192, 128}));  // (8 + 2 * 2) * 16 rows
    EXPECT_EQ(m.parameters()[5]->value.shape(), (Shape{384, 128}));  // gate [ffn, D]
    EXPECT_EQ(m.parameters()[7]->value.shape(), (Shape{128, 384}));  // down [D, ffn]
}

// A tied output layer owns no weight, reads the embedding's table and sends its gradient there:
// the table's gradient is the finite difference of the loss through both of its uses.
TEST(LlamaModel, TiedOutputSharesTheTableAndItsGradient) {
    auto dev = make_cpu_device(0);
    nn::LayerSpec emb;
    emb.type = "embedding";
    emb.vocab = 11;
    emb.dim = 6;
    nn::LayerSpec norm;
    norm.type = "rmsnorm";
    norm.bias = false;
    nn::LayerSpec head;
    head.type = "linear";
    head.out = 11;
    head.bias = false;
    head.tie_embeddings = true;
    nn::Model m({emb, norm, head}, Shape{5}, "cross_entropy", DType::f64, *dev);
    Rng rng(21);
    m.reset_parameters(rng);
    EXPECT_EQ(m.parameter_count(), 11 * 6 + 6);
    ASSERT_EQ(m.parameters().size(), 2u);
    Tensor x = Tensor::empty(Shape{3, 5}, DType::f64, *dev, MemCategory::activations);
    Tensor y = Tensor::empty(Shape{3, 5}, DType::f64, *dev, MemCategory::activations);
    for (int64_t k = 0; k < 15; ++k) {
        x.data<double>()[k] = static_cast<double>((k * 7) % 11);
        y.data<double>()[k] = static_cast<double>((k * 3 + 1) % 11);
    }
    const auto loss_of = [&] { return m.loss().forward(m.forward(x, Mode::train), y); };
    m.zero_grad();
    loss_of();
    m.backward(m.loss().backward());
    nn::Param& table = *m.parameters()[0];
    const Tensor grad = table.grad.clone(MemCategory::activations);
    // Every row is a class of the logits, so every entry has a gradient through the output.
    int nonzero = 0;
    for (int64_t i = 0; i < table.value.numel(); ++i) {
        double& w = table.value.data<double>()[i];
        const double keep = w;
        w = keep + 1e-6;
        const double up = loss_of();
        w = keep - 1e-6;
        const double down = loss_of();
        w = keep;
        const double numeric = (up - down) / 2e-6;
        EXPECT_NEAR(grad.data<double>()[i], numeric, 1e-6 + 1e-5 * std::abs(numeric)) << "table[" << i << "]";
        nonzero += std::abs(numeric) > 1e-8;
    }
    EXPECT_GT(nonzero, 60);
}

// ---- context parallelism -----------------------------------------------------------------------

struct Cp {
    int cp;
    bool causal, rope;
    int64_t heads, kv_heads;
    nn::ContextShard::Comm comm;
    bool block = false;  // a Llama transformer_block (rmsnorm, SwiGLU) around the attention
    int64_t T = 16, D = 16;
};
void PrintTo(const Cp& a, std::ostream* out) {
    *out << "cp" << a.cp << (a.causal ? " causal" : " full") << (a.rope ? " rope" : "") << " H" << a.heads << " KV"
         << a.kv_heads << (a.comm == nn::ContextShard::Comm::ring ? " ring" : " all_gather") << (a.block ? " block" : "")
         << " T" << a.T;
}

std::unique_ptr<nn::Layer> cp_layer(const Cp& a) {
    nn::AttentionOptions o{a.heads, a.kv_heads, a.causal, 0.0, a.rope, 10000.0, true};
    if (a.block) return std::make_unique<nn::TransformerBlock>(o, nn::BlockOptions{24, true, true});
    return std::make_unique<nn::Attention>(o);
}

nn::Attention* attention_in(nn::Layer& layer) {
    if (auto* a = dynamic_cast<nn::Attention*>(&layer)) return a;
    for (nn::Layer* c : layer.children())
        if (nn::Attention* a = attention_in(*c)) return a;
    return nullptr;
}

// One device's share of a context-parallel forward and backward.
struct CpResult {
    std::unique_ptr<Device> device;  // first, so that it outlives the tensors on it
    Tensor x, dy;                    // this device's rows of the input and the output gradient
    Tensor y, dx;                    // and of the output and the input gradient
    std::vector<Tensor> grads;       // its parameters' gradients
    int64_t forward_bytes = 0, backward_bytes = 0;
    nn::ContextWork work;
};

// The ring's and the gather's exchanges over a rank of an in-process group.
nn::ContextShard context_shard(comm::Communicator& c, nn::ContextShard::Comm mode) {
    nn::ContextShard s{c.rank(), c.world(), mode};
    s.send = [&c](const Tensor& t) { c.send(t.raw(), t.numel(), t.dtype(), (c.rank() + 1) % c.world()); };
    s.recv = [&c](const Tensor& t) { c.recv(t.raw(), t.numel(), t.dtype(), (c.rank() + c.world() - 1) % c.world()); };
    s.all_gather = [&c](const Tensor& t) { c.all_gather(t.raw(), t.numel(), t.dtype()); };
    s.reduce_scatter = [&c](const Tensor& t) { c.reduce_scatter(t.raw(), t.numel(), t.dtype(), comm::ReduceOp::sum); };
    return s;
}

Tensor on(const Tensor& t, Device& dev) {
    Tensor out = Tensor::empty(t.shape(), t.dtype(), dev, MemCategory::activations);
    out.copy_from(t);
    return out;
}

// The cp devices as threads, each with `whole`'s parameters, its zig-zag rows of x and dy.
std::vector<CpResult> run_context_parallel(const Cp& a, nn::Layer& whole, const Tensor& x, const Tensor& dy) {
    comm::LocalGroup group(a.cp);
    std::vector<CpResult> out(static_cast<size_t>(a.cp));
    for (int r = 0; r < a.cp; ++r) {
        CpResult& res = out[static_cast<size_t>(r)];
        res.device = make_cpu_device(r);
        res.x = on(nn::context_slice(x, r, a.cp), *res.device);
        res.dy = on(nn::context_slice(dy, r, a.cp), *res.device);
    }
    std::vector<std::exception_ptr> errors(static_cast<size_t>(a.cp));
    std::vector<std::thread> threads;
    for (int r = 0; r < a.cp; ++r)
        threads.emplace_back([&, r] {
            try {
                CpResult& res = out[static_cast<size_t>(r)];
                Device& dev = *res.device;
                comm::Communicator& c = group.rank(r);
                auto layer = cp_layer(a);
                nn::give_context_shard(*layer, context_shard(c, a.comm));
                layer->set_label("model.layers[1] (" + layer->type() + ")", "model.layers[1]");
                layer->build(Shape{a.T / a.cp, a.D}, DType::f64, dev);
                const auto mine = layer->parameters(), theirs = whole.parameters();
                for (size_t k = 0; k < mine.size(); ++k) mine[k]->value.copy_from(theirs[k]->value);
                layer->zero_grad();
                const int64_t before = c.totals().bytes;
                res.y = layer->forward(res.x, Mode::train).clone(MemCategory::activations);
                res.forward_bytes = c.totals().bytes - before;
                res.work = attention_in(*layer)->context_work();
                res.dx = layer->backward(res.dy).clone(MemCategory::activations);
                res.backward_bytes = c.totals().bytes - before - res.forward_bytes;
                for (nn::Param* p : mine) res.grads.push_back(p->grad.clone(MemCategory::gradients));
            } catch (...) {
                errors[static_cast<size_t>(r)] = std::current_exception();
                group.abort("rank " + std::to_string(r) + " failed");
            }
        });
    for (auto& t : threads) t.join();
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
    return out;
}

// Every device's outputs and input gradients are the single device's at its zig-zag rows, the
// parameters' gradients summed over the devices the single device's; the keys and values of
// kv_heads cross the ring cp − 1 times forward (their gradients cp times more backward); every
// device computes the same chunk pairs.
class ContextParallel : public paralab::testing::LayerFixture, public ::testing::WithParamInterface<Cp> {};
TEST_P(ContextParallel, DevicesAreTheSingleDevicesRowsAndSumsOfItsGradients) {
    const Cp a = GetParam();
    const int64_t B = 2;
    auto whole = built(cp_layer(a), Shape{a.T, a.D});
    whole->zero_grad();
    const Tensor x = random(Shape{B, a.T, a.D}, 31), dy = random(Shape{B, a.T, a.D}, 32);
    const Tensor y = whole->forward(x, Mode::train).clone(MemCategory::activations);
    const Tensor dx = whole->backward(dy).clone(MemCategory::activations);
    const std::vector<CpResult> devices = run_context_parallel(a, *whole, x, dy);

    const int64_t kv_row = 2 * a.kv_heads * (a.D / a.heads) * 8;  // a row's keys and values, f64
    const int64_t local = a.T / a.cp;
    const bool ring = a.comm == nn::ContextShard::Comm::ring;
    const auto params = whole->parameters();
    for (int r = 0; r < a.cp; ++r) {
        const CpResult& d = devices[static_cast<size_t>(r)];
        const Tensor want_y = nn::context_slice(y, r, a.cp), want_dx = nn::context_slice(dx, r, a.cp);
        ASSERT_EQ(d.y.shape(), want_y.shape());
        for (int64_t k = 0; k < want_y.numel(); ++k)
            ASSERT_NEAR(d.y.data<double>()[k], want_y.data<double>()[k], 1e-10) << "device " << r << " y " << k;
        for (int64_t k = 0; k < want_dx.numel(); ++k)
            ASSERT_NEAR(d.dx.data<double>()[k], want_dx.data<double>()[k], 1e-10) << "device " << r << " dx " << k;
        EXPECT_EQ(d.forward_bytes, (a.cp - 1) * B * local * kv_row) << "device " << r;
        EXPECT_EQ(d.backward_bytes, (ring ? 2 * a.cp - 1 : 2 * (a.cp - 1)) * B * local * kv_row) << "device " << r;
        EXPECT_EQ(d.work, (a.causal ? nn::ContextWork{2 * a.cp - 1, 2} : nn::ContextWork{4 * a.cp, 0}))
            << "device " << r;
    }
    for (size_t p = 0; p < params.size(); ++p)
        for (int64_t k = 0; k < params[p]->grad.numel(); ++k) {
            double sum = 0;
            for (const CpResult& d : devices) sum += d.grads[p].data<double>()[k];
            ASSERT_NEAR(sum, params[p]->grad.data<double>()[k], 1e-10) << params[p]->name << " " << k;
        }
}
using Comm = nn::ContextShard::Comm;
INSTANTIATE_TEST_SUITE_P(
    Meshes, ContextParallel,
    ::testing::Values(Cp{2, true, true, 4, 2, Comm::ring}, Cp{4, true, true, 4, 2, Comm::ring},
                      Cp{2, false, false, 2, 2, Comm::ring}, Cp{4, false, true, 4, 1, Comm::all_gather},
                      Cp{4, true, true, 4, 2, Comm::all_gather}, Cp{2, true, true, 4, 2, Comm::ring, true},
                      Cp{4, true, false, 2, 1, Comm::all_gather, true},
                      // chunks of 130 rows cross the fused kernel's 128-row blocks
                      Cp{2, true, true, 2, 1, Comm::ring, false, 520, 8}),
    [](const auto& info) {
        const Cp& a = info.param;
        return "cp" + std::to_string(a.cp) + (a.causal ? "_causal" : "_full") + (a.rope ? "_rope" : "") + "_H" +
               std::to_string(a.heads) + "_KV" + std::to_string(a.kv_heads) +
               (a.comm == Comm::ring ? "_ring" : "_all_gather") + (a.block ? "_block" : "") + "_T" +
               std::to_string(a.T);
    });

// Context and tensor parallelism together, cp 2 · tp 2 on four threads: each tensor rank computes
// its heads of its context rank's rows (the keys and values of its kv_heads going round the
// context ring), and gives the single device's rows; each parameter slice's gradient summed
// over the context ranks is the single device's slice.
TEST_F(LlamaTest, ContextParallelAttentionComposesWithTensorParallelHeads) {
    const int64_t B = 2, T = 16, D = 16, H = 4, KV = 2, hd = D / H;
    const int cp = 2, tp = 2;
    auto whole = built(std::make_unique<nn::Attention>(attn(H, KV, true, true)), Shape{T, D});
    whole->zero_grad();
    const Tensor x = random(Shape{B, T, D}, 33), dy = random(Shape{B, T, D}, 34);
    const Tensor y = whole->forward(x, Mode::train).clone(MemCategory::activations);
    const Tensor dx = whole->backward(dy).clone(MemCategory::activations);
    const auto wp = whole->parameters();  // qkv.weight, qkv.bias, proj.weight, proj.bias
    // Tensor rank t's rows of the qkv projection: its heads of q, of k and of v.
    const auto qkv_row = [&](int t, int64_t r) {
        const int64_t q = H / tp * hd, kv = KV / tp * hd;
        if (r < q) return t * q + r;
        if (r < q + kv) return H * hd + t * kv + (r - q);
        return (H + KV) * hd + t * kv + (r - q - kv);
    };
    std::vector<std::unique_ptr<comm::LocalGroup>> tp_groups, cp_groups;
    for (int g = 0; g < cp; ++g) tp_groups.push_back(std::make_unique<comm::LocalGroup>(tp));
    for (int g = 0; g < tp; ++g) cp_groups.push_back(std::make_unique<comm::LocalGroup>(cp));
    std::vector<CpResult> out(static_cast<size_t>(cp * tp));
    for (int k = 0; k < cp * tp; ++k) {
        CpResult& res = out[static_cast<size_t>(k)];
        res.device = make_cpu_device(k);
        res.x = on(nn::context_slice(x, k / tp, cp), *res.device);
        res.dy = on(nn::context_slice(dy, k / tp, cp), *res.device);
    }
    std::vector<std::exception_ptr> errors(out.size());
    std::vector<std::thread> threads;
    for (int k = 0; k < cp * tp; ++k)
        threads.emplace_back([&, k] {
            const int t = k % tp, c = k / tp;
            try {
                CpResult& res = out[static_cast<size_t>(k)];
                comm::Communicator& tg = tp_groups[static_cast<size_t>(c)]->rank(t);
                auto layer = std::make_unique<nn::Attention>(attn(H, KV, true, true));
                layer->set_tensor_shard(nn::TensorShard{
                    t, tp, [&tg](const Tensor& v) { tg.all_reduce(v, comm::ReduceOp::sum); }});
                layer->set_context_shard(context_shard(cp_groups[static_cast<size_t>(t)]->rank(c), Comm::ring));
                layer->set_label("model.layers[1] (attention)", "model.layers[1]");
                layer->build(Shape{T / cp, D}, DType::f64, *res.device);
                const auto p = layer->parameters();
                for (int64_t r = 0; r < p[0]->value.dim(0); ++r) {
                    for (int64_t i = 0; i < D; ++i)
                        p[0]->value.data<double>()[r * D + i] = wp[0]->value.data<double>()[qkv_row(t, r) * D + i];
                    p[1]->value.data<double>()[r] = wp[1]->value.data<double>()[qkv_row(t, r)];
                }
                for (int64_t r = 0; r < D; ++r)
                    for (int64_t i = 0; i < D / tp; ++i)
                        p[2]->value.data<double>()[r * (D / tp) + i] = wp[2]->value.data<double>()[r * D + t * (D / tp) + i];
                p[3]->value.copy_from(wp[3]->value);
                layer->zero_grad();
                res.y = layer->forward(res.x, Mode::train).clone(MemCategory::activations);
                res.dx = layer->backward(res.dy).clone(MemCategory::activations);
                for (nn::Param* q : p) res.grads.push_back(q->grad.clone(MemCategory::gradients));
            } catch (...) {
                errors[static_cast<size_t>(k)] = std::current_exception();
                for (auto& g : tp_groups) g->abort("rank failed");
                for (auto& g : cp_groups) g->abort("rank failed");
            }
        });
    for (auto& th : threads) th.join();
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);
    for (int k = 0; k < cp * tp; ++k) {
        const CpResult& d = out[static_cast<size_t>(k)];
        const Tensor want_y = nn::context_slice(y, k / tp, cp), want_dx = nn::context_slice(dx, k / tp, cp);
        for (int64_t i = 0; i < want_y.numel(); ++i)
            ASSERT_NEAR(d.y.data<double>()[i], want_y.data<double>()[i], 1e-10) << "device " << k << " y " << i;
        for (int64_t i = 0; i < want_dx.numel(); ++i)
            ASSERT_NEAR(d.dx.data<double>()[i], want_dx.data<double>()[i], 1e-10) << "device " << k << " dx " << i;
    }
    // Each slice's gradient summed over the context ranks c of tensor rank t.
    const auto summed = [&](int t, size_t p, int64_t i) {
        double s = 0;
        for (int c = 0; c < cp; ++c) s += out[static_cast<size_t>(c * tp + t)].grads[p].data<double>()[i];
        return s;
    };
    for (int t = 0; t < tp; ++t) {
        const int64_t rows = out[static_cast<size_t>(t)].grads[1].numel();
        for (int64_t r = 0; r < rows; ++r) {
            for (int64_t i = 0; i < D; ++i)
                ASSERT_NEAR(summed(t, 0, r * D + i), wp[0]->grad.data<double>()[qkv_row(t, r) * D + i], 1e-10);
            ASSERT_NEAR(summed(t, 1, r), wp[1]->grad.data<double>()[qkv_row(t, r)], 1e-10);
        }
        for (int64_t r = 0; r < D; ++r)
            for (int64_t i = 0; i < D / tp; ++i)
                ASSERT_NEAR(summed(t, 2, r * (D / tp) + i), wp[2]->grad.data<double>()[r * D + t * (D / tp) + i], 1e-10);
        for (int64_t i = 0; i < D; ++i) ASSERT_NEAR(summed(t, 3, i), wp[3]->grad.data<double>()[i], 1e-10);
    }
}

// A device holds T / cp rows: its attention keeps 1 / cp of the single device's activations and
// computes 1 / cp of its FLOPs; backward adds the keys and values in flight with their gradients.
TEST_F(LlamaTest, ContextParallelAttentionHoldsItsShareOfActivationsAndFlops) {
    const int64_t T = 64, D = 32, H = 4, KV = 2, hd = D / H, cp = 4, local = T / cp;
    auto whole = built(std::make_unique<nn::Attention>(attn(H, KV, true, false)), Shape{T, D});
    for (const Comm mode : {Comm::ring, Comm::all_gather}) {
        auto a = std::make_unique<nn::Attention>(attn(H, KV, true, false));
        a->set_context_shard(nn::ContextShard{1, static_cast<int>(cp), mode});
        auto* shard = a.get();
        auto layer = built(std::move(a), Shape{local, D});
        EXPECT_EQ(layer->activations_per_sample() * cp, whole->activations_per_sample());
        EXPECT_EQ(layer->flops_per_sample() * cp, whole->flops_per_sample());
        EXPECT_EQ(layer->parameter_count(), whole->parameter_count());
        const int64_t kv = 2 * local * KV * hd;
        EXPECT_EQ(shard->backward_per_sample(), 3 * local * D + 2 * (mode == Comm::ring ? 2 * kv : cp * kv));
    }
}

// What the zig-zag split cannot take is refused naming its cause: a sequence that does not cut
// into 2·cp chunks, the materialized kernel, a learned position table.
TEST_F(LlamaTest, ContextParallelRefusesWhatItCannotSplit) {
    const auto refusal = [&](nn::AttentionOptions o, int64_t rows) -> std::pair<std::string, std::string> {
        auto a = std::make_unique<nn::Attention>(o);
        a->set_context_shard(nn::ContextShard{0, 2});
        try {
            built(std::move(a), Shape{rows, 8});
        } catch (const ConfigError& e) {
            return {e.path(), e.what()};
        }
        return {"", "accepted"};
    };
    auto [path, what] = refusal(attn(2, 1, true, false), 3);
    EXPECT_EQ(path, "model.layers[1].input");
    EXPECT_NE(what.find("a sequence of 6 positions does not divide into 2·cp = 4 equal chunks"), std::string::npos)
        << what;
    nn::AttentionOptions materialized = attn(2, 1, true, false);
    materialized.kernel = nn::AttentionKernel::materialized;
    std::tie(path, what) = refusal(materialized, 4);
    EXPECT_EQ(path, "model.layers[1].kernel");
    EXPECT_NE(what.find("fused"), std::string::npos) << what;
    EXPECT_EQ(refusal(attn(2, 1, true, false), 4).second, "accepted");
    EXPECT_THROW(nn::context_positions(10, 0, 3, "data.seq_len"), ConfigError);
    nn::PositionEmbedding table;
    EXPECT_THROW(nn::give_context_shard(table, nn::ContextShard{0, 2}), ConfigError);
}

// ---- errors at their JSON paths -------------------------------------------------------------

json llama_file() {
    return json::parse(R"({
      "paralab": 1, "name": "t",
      "data": {"dataset": "text", "seq_len": 16, "batch_size": 2},
      "model": {"input": [16], "layers": [
        {"type": "embedding", "vocab": 256, "dim": 32},
        {"type": "transformer_block", "heads": 4, "kv_heads": 2, "ffn": 64, "position": "rope",
         "norm": "rmsnorm", "mlp": "swiglu", "bias": false},
        {"type": "rmsnorm"},
        {"type": "linear", "out": 256, "bias": false, "tie_embeddings": true}],
        "loss": "cross_entropy"},
      "devices": ["cpu:0"], "strategy": {"type": "single"}, "optimizer": {"type": "adamw", "lr": 0.001}
    })");
}

using paralab::testing::error_of;

TEST(LlamaErrors, TheFileParsesBuildsAndRoundTrips) {
    EXPECT_EQ(error_of(llama_file()), "");
    const auto e = run::parse_experiment(llama_file());
    EXPECT_EQ(e.layers[1].kv_heads, 2);
    EXPECT_EQ(e.layers[1].position, "rope");
    EXPECT_EQ(e.layers[1].rope_theta, 10000.0);
    EXPECT_EQ(run::to_json(run::parse_experiment(run::to_json(e))), run::to_json(e));
    EXPECT_EQ(run::to_json(e)["model"]["layers"][1]["kv_heads"], 2);
    EXPECT_EQ(run::to_json(e)["model"]["layers"][3]["tie_embeddings"], true);
}

using paralab::testing::BadCase;

class LlamaBadFile : public ::testing::TestWithParam<BadCase> {};
TEST_P(LlamaBadFile, IsRefusedAtItsPath) {
    json j = llama_file();
    GetParam().edit(j["model"]["layers"]);
    std::string path;
    const std::string what = error_of(j, &path);
    EXPECT_EQ(path, GetParam().path) << what;
    EXPECT_NE(what.find(GetParam().says), std::string::npos) << what;
}
INSTANTIATE_TEST_SUITE_P(
    Errors, LlamaBadFile,
    ::testing::Values(
        BadCase{"kv_heads_not_dividing_heads", [](json& l) { l[1]["kv_heads"] = 3; }, "model.layers[1].kv_heads",
                "expected a divisor of heads = 4"},
        BadCase{"rope_with_an_odd_head_width",
                [](json& l) {
                    l[0]["dim"] = 24;
                    l[1]["heads"] = 8;
                    l[1]["kv_heads"] = 8;
                },
                "model.layers[1].position", "head width D / heads = 24 / 8 = 3 is odd"},
        BadCase{"tie_with_out_not_the_vocabulary", [](json& l) { l[3]["out"] = 255; }, "model.layers[3].out",
                "expected 256, the vocabulary of model.layers[0]"},
        BadCase{"tie_not_on_the_last_layer",
                [](json& l) { l.push_back(json{{"type", "relu"}}); }, "model.layers[3].tie_embeddings",
                "only the model's last layer"},
        BadCase{"unknown_norm", [](json& l) { l[1]["norm"] = "batchnorm"; }, "model.layers[1].norm", "rmsnorm"},
        BadCase{"unknown_mlp", [](json& l) { l[1]["mlp"] = "relu"; }, "model.layers[1].mlp", "swiglu"},
        BadCase{"unknown_position", [](json& l) { l[1]["position"] = "alibi"; }, "model.layers[1].position", "rope"},
        BadCase{"rope_theta_without_rope",
                [](json& l) {
                    l[1].erase("position");
                    l[1]["rope_theta"] = 500000;
                },
                "model.layers[1].rope_theta", "needs \"position\": \"rope\""}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
