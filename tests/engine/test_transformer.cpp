// The transformer's layers: position embedding, attention and the GPT block, their gradients
// against finite differences (causal masking and dropout included), the attention kernels
// against a plain reference, causality, parameter counts, the per-position cross-entropy,
// `repeat`, and the errors a file can cause.
#include <gtest/gtest.h>
#include <kernels/cpu/attention.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/nn/loss.h"
#include "engine/nn/model.h"
#include "engine/util/rng.h"
#include "layer_fixture.h"
#include "gradcheck.h"

using namespace paralab;
using nn::Mode;
namespace pt = paralab::testing;
using pt::GradCase;

namespace {

using pt::make;

// ---- gradients ------------------------------------------------------------------------------

class TransformerGrad : public ::testing::TestWithParam<GradCase> {};
TEST_P(TransformerGrad, MatchesFiniteDifferences) { pt::check_layer_gradients(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Grad, TransformerGrad,
    ::testing::Values(
        GradCase{"position_embedding_5x3", make<nn::PositionEmbedding>(), Shape{5, 3}, 3},
        GradCase{"attention_causal_T5_D6_H2", make<nn::Attention>(int64_t{2}, true, 0.0), Shape{5, 6}},
        GradCase{"attention_full_T4_D6_H3", make<nn::Attention>(int64_t{3}, false, 0.0), Shape{4, 6}},
        GradCase{"attention_one_head", make<nn::Attention>(int64_t{1}, true, 0.0), Shape{3, 4}, 1},
        // Longer than one row block of the kernels (32), so the blocks right of the diagonal
        // are skipped and the block edges are crossed.
        GradCase{"attention_causal_T40", make<nn::Attention>(int64_t{2}, true, 0.0), Shape{40, 4}, 1},
        // The fused kernel's blocks are 128 query rows by 128 keys: T = 130 crosses both edges.
        GradCase{"attention_fused_causal_T130", make<nn::Attention>(int64_t{2}, true, 0.0), Shape{130, 4}, 1},
        GradCase{"attention_materialized_causal_T5",
                 make<nn::Attention>(nn::AttentionOptions{2, 0, true, 0.0, false, 10000.0, true,
                                                          nn::AttentionKernel::materialized}),
                 Shape{5, 6}},
        GradCase{"attention_materialized_full_T4",
                 make<nn::Attention>(nn::AttentionOptions{3, 0, false, 0.0, false, 10000.0, true,
                                                          nn::AttentionKernel::materialized}),
                 Shape{4, 6}},
        GradCase{"attention_dropout_train", make<nn::Attention>(int64_t{2}, true, 0.3), Shape{5, 4}},
        GradCase{"attention_dropout_eval", make<nn::Attention>(int64_t{2}, true, 0.3), Shape{5, 4}, 2,
                 Mode::eval},
        GradCase{"block_causal_T4_D8_H2_ffn12", make<nn::TransformerBlock>(int64_t{2}, int64_t{12}, 0.0, true),
                 Shape{4, 8}},
        GradCase{"block_dropout", make<nn::TransformerBlock>(int64_t{2}, int64_t{8}, 0.2, true), Shape{3, 4}},
        GradCase{"block_bidirectional", make<nn::TransformerBlock>(int64_t{1}, int64_t{6}, 0.0, false),
                 Shape{3, 4}, 1}),
    pt::GradCaseName{});

// ---- kernels against a plain reference ------------------------------------------------------

struct Attn {
    int64_t B, T, H, Dh;
    bool causal;
};

// The textbook computation in double, one (b, h) at a time.
void reference(const Attn& a, const std::vector<double>& qkv, std::vector<double>& probs, std::vector<double>& out) {
    const int64_t D = a.H * a.Dh;
    probs.assign(static_cast<size_t>(a.B * a.H * a.T * a.T), 0.0);
    out.assign(static_cast<size_t>(a.B * a.T * D), 0.0);
    for (int64_t b = 0; b < a.B; ++b)
        for (int64_t h = 0; h < a.H; ++h)
            for (int64_t i = 0; i < a.T; ++i) {
                std::vector<double> s(static_cast<size_t>(a.T), -INFINITY);
                double max = -INFINITY;
                for (int64_t j = 0; j < a.T; ++j) {
                    if (a.causal && j > i) continue;
                    double dot = 0;
                    for (int64_t d = 0; d < a.Dh; ++d)
                        dot += qkv[static_cast<size_t>((b * a.T + i) * 3 * D + h * a.Dh + d)] *
                               qkv[static_cast<size_t>((b * a.T + j) * 3 * D + D + h * a.Dh + d)];
                    s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(a.Dh));
                    max = std::max(max, s[static_cast<size_t>(j)]);
                }
                double sum = 0;
                for (auto& v : s) sum += v == -INFINITY ? 0.0 : (v = std::exp(v - max));
                for (int64_t j = 0; j < a.T; ++j) {
                    const double p = s[static_cast<size_t>(j)] == -INFINITY ? 0.0 : s[static_cast<size_t>(j)] / sum;
                    probs[static_cast<size_t>(((b * a.H + h) * a.T + i) * a.T + j)] = p;
                    for (int64_t d = 0; d < a.Dh; ++d)
                        out[static_cast<size_t>((b * a.T + i) * D + h * a.Dh + d)] +=
                            p * qkv[static_cast<size_t>((b * a.T + j) * 3 * D + 2 * D + h * a.Dh + d)];
                }
            }
}

class AttentionKernels : public ::testing::TestWithParam<Attn> {};
TEST_P(AttentionKernels, ForwardMatchesTheTextbookAndMaskedEntriesAreZero) {
    const Attn a = GetParam();
    const int64_t D = a.H * a.Dh;
    Rng rng(11);
    std::vector<double> qkv(static_cast<size_t>(a.B * a.T * 3 * D));
    for (auto& v : qkv) v = rng.normal();
    std::vector<double> want_probs, want_out;
    reference(a, qkv, want_probs, want_out);
    std::vector<float> qkv32(qkv.begin(), qkv.end());
    std::vector<float> probs(want_probs.size(), -1.0f), out(want_out.size(), -1.0f);
    kernels::cpu::attention_scores_softmax<float>(a.B, a.T, a.H, a.Dh, a.causal, qkv32.data(), probs.data());
    kernels::cpu::attention_apply<float>(a.B, a.T, a.H, a.Dh, a.causal, probs.data(), qkv32.data(), out.data());
    for (size_t k = 0; k < probs.size(); ++k) {
        if (want_probs[k] == 0.0) {
            ASSERT_EQ(probs[k], 0.0f) << "masked entry " << k;
        }
        ASSERT_NEAR(probs[k], want_probs[k], 1e-5) << k;
    }
    for (size_t k = 0; k < out.size(); ++k) ASSERT_NEAR(out[k], want_out[k], 1e-4) << k;

    // The backward's masked score gradients are exactly zero too.
    std::vector<float> dout(out.size()), dprobs(probs.size(), -1.0f), dqkv(qkv32.size(), -1.0f);
    for (auto& v : dout) v = static_cast<float>(rng.normal());
    kernels::cpu::attention_backward_values<float>(a.B, a.T, a.H, a.Dh, a.causal, probs.data(), qkv32.data(),
                                                   dout.data(), dprobs.data(), dqkv.data());
    kernels::cpu::attention_backward_scores<float>(a.B, a.T, a.H, a.Dh, a.causal, probs.data(), qkv32.data(),
                                                   dprobs.data(), dqkv.data());
    for (size_t k = 0; k < probs.size(); ++k)
        if (want_probs[k] == 0.0) {
            ASSERT_EQ(dprobs[k], 0.0f) << "masked score gradient " << k;
        }
    for (float v : dqkv) ASSERT_TRUE(std::isfinite(v));

    // The fused pass gives the same output, and its backward the same dqkv, as the stored
    // probabilities' passes.
    std::vector<float> fused_out(out.size(), -1.0f), lse(static_cast<size_t>(a.B * a.H * a.T), -1.0f);
    kernels::cpu::attention_fused_forward<float>(a.B, a.T, a.H, a.Dh, a.causal, qkv32.data(), fused_out.data(),
                                                 lse.data());
    for (size_t k = 0; k < out.size(); ++k) ASSERT_NEAR(fused_out[k], want_out[k], 1e-4) << k;
    std::vector<float> fused_dqkv(qkv32.size(), -1.0f);
    kernels::cpu::attention_fused_backward<float>(a.B, a.T, a.H, a.Dh, a.causal, qkv32.data(), fused_out.data(),
                                                  dout.data(), lse.data(), fused_dqkv.data());
    for (size_t k = 0; k < dqkv.size(); ++k) ASSERT_NEAR(fused_dqkv[k], dqkv[k], 2e-4 * (1 + std::abs(dqkv[k]))) << k;
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionKernels,
                         ::testing::Values(Attn{2, 5, 3, 4, true}, Attn{2, 5, 3, 4, false}, Attn{1, 1, 1, 8, true},
                                           Attn{2, 70, 2, 8, true}, Attn{1, 33, 4, 2, false},
                                           Attn{1, 130, 2, 4, true}, Attn{1, 129, 1, 4, false}),
                         [](const auto& info) {
                             const Attn& a = info.param;
                             return "B" + std::to_string(a.B) + "_T" + std::to_string(a.T) + "_H" +
                                    std::to_string(a.H) + "_Dh" + std::to_string(a.Dh) +
                                    (a.causal ? "_causal" : "_full");
                         });

// Ring attention from the fused passes: a sequence of 2n positions as two halves, each half's
// queries against each half's keys in a pass of its own (causal only on a half against itself,
// the later keys skipped), merged by attention_merge, is the fused pass over the whole sequence;
// and each pass's backward, given the merged output and log-sum-exp, adds up to the whole
// backward's query, key and value gradients.
struct Ring {
    int64_t B, n, H, Dh;
    bool causal;
};
class AttentionRingKernels : public ::testing::TestWithParam<Ring> {};
TEST_P(AttentionRingKernels, MergedBlocksAreTheWholeAttentionForwardAndBackward) {
    const Ring a = GetParam();
    const int64_t D = a.H * a.Dh, T = 2 * a.n;
    namespace kc = kernels::cpu;
    Rng rng(12);
    std::vector<double> qkv(static_cast<size_t>(a.B * T * 3 * D)), dout(static_cast<size_t>(a.B * T * D));
    for (auto& v : qkv) v = rng.normal();
    for (auto& v : dout) v = rng.normal();
    std::vector<double> out(dout.size()), lse(static_cast<size_t>(a.B * a.H * T)), dqkv(qkv.size());
    kc::attention_fused_forward<double>(a.B, T, a.H, a.Dh, a.causal, qkv.data(), out.data(), lse.data());
    kc::attention_fused_backward<double>(a.B, T, a.H, a.Dh, a.causal, qkv.data(), out.data(), dout.data(), lse.data(),
                                         dqkv.data());
    // Rows [half·n, half·n + n) of each sequence of `len` rows `w` wide.
    const auto row = [&](int64_t b, int half, int64_t t, int64_t len, int64_t w) { return ((b * len) + half * a.n + t) * w; };
    const auto block = [&](int qh, int kh) {  // q of half qh, k and v of half kh: [B, n, 3D]
        std::vector<double> blk(static_cast<size_t>(a.B * a.n * 3 * D));
        for (int64_t b = 0; b < a.B; ++b)
            for (int64_t t = 0; t < a.n; ++t)
                for (int64_t c = 0; c < 3 * D; ++c)
                    blk[static_cast<size_t>((b * a.n + t) * 3 * D + c)] =
                        qkv[static_cast<size_t>(row(b, c < D ? qh : kh, t, T, 3 * D) + c)];
        return blk;
    };
    std::vector<double> mo[2], ml[2], mdo[2];
    for (int qh = 0; qh < 2; ++qh) {
        mo[qh].assign(static_cast<size_t>(a.B * a.n * D), 0.0);
        ml[qh].assign(static_cast<size_t>(a.B * a.H * a.n), -INFINITY);
        mdo[qh].resize(mo[qh].size());
        for (int64_t b = 0; b < a.B; ++b)
            for (int64_t t = 0; t < a.n; ++t)
                for (int64_t c = 0; c < D; ++c)
                    mdo[qh][static_cast<size_t>((b * a.n + t) * D + c)] = dout[static_cast<size_t>(row(b, qh, t, T, D) + c)];
        for (int kh = 0; kh <= (a.causal ? qh : 1); ++kh) {
            const auto blk = block(qh, kh);
            std::vector<double> bo(mo[qh].size()), bl(ml[qh].size());
            kc::attention_fused_forward<double>(a.B, a.n, a.H, a.Dh, a.causal && kh == qh, blk.data(), bo.data(), bl.data());
            kc::attention_merge<double>(a.B, a.n, a.H, a.Dh, bo.data(), bl.data(), mo[qh].data(), ml[qh].data());
        }
        for (int64_t b = 0; b < a.B; ++b)
            for (int64_t t = 0; t < a.n; ++t) {
                for (int64_t c = 0; c < D; ++c)
                    ASSERT_NEAR(mo[qh][static_cast<size_t>((b * a.n + t) * D + c)],
                                out[static_cast<size_t>(row(b, qh, t, T, D) + c)], 1e-12);
                for (int64_t h = 0; h < a.H; ++h)
                    ASSERT_NEAR(ml[qh][static_cast<size_t>((b * a.H + h) * a.n + t)],
                                lse[static_cast<size_t>((b * a.H + h) * T + qh * a.n + t)], 1e-12);
            }
    }
    // The blocks' gradients gathered: q by the query half, k and v by the key half.
    std::vector<double> sum(qkv.size(), 0.0);
    for (int qh = 0; qh < 2; ++qh)
        for (int kh = 0; kh <= (a.causal ? qh : 1); ++kh) {
            const auto blk = block(qh, kh);
            std::vector<double> dblk(blk.size());
            kc::attention_fused_backward<double>(a.B, a.n, a.H, a.Dh, a.causal && kh == qh, blk.data(), mo[qh].data(),
                                                 mdo[qh].data(), ml[qh].data(), dblk.data());
            for (int64_t b = 0; b < a.B; ++b)
                for (int64_t t = 0; t < a.n; ++t)
                    for (int64_t c = 0; c < 3 * D; ++c)
                        sum[static_cast<size_t>(row(b, c < D ? qh : kh, t, T, 3 * D) + c)] +=
                            dblk[static_cast<size_t>((b * a.n + t) * 3 * D + c)];
        }
    for (size_t k = 0; k < sum.size(); ++k) ASSERT_NEAR(sum[k], dqkv[k], 1e-11 * (1 + std::abs(dqkv[k]))) << k;
}
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionRingKernels,
                         ::testing::Values(Ring{2, 5, 3, 4, true}, Ring{2, 5, 3, 4, false}, Ring{1, 1, 2, 2, true},
                                           Ring{1, 130, 2, 4, true}),
                         [](const auto& info) {
                             const Ring& a = info.param;
                             return "B" + std::to_string(a.B) + "_n" + std::to_string(a.n) + "_H" +
                                    std::to_string(a.H) + "_Dh" + std::to_string(a.Dh) +
                                    (a.causal ? "_causal" : "_full");
                         });

// ---- behaviour ------------------------------------------------------------------------------

class TransformerTest : public paralab::testing::LayerFixture {};

// A later token must not change an earlier output: change position 3 of 6 and compare.
TEST_F(TransformerTest, CausalOutputsIgnoreFutureTokens) {
    for (const bool block : {false, true}) {
        auto layer = block ? built(std::make_unique<nn::TransformerBlock>(2, 16, 0.0, true), Shape{6, 8})
                           : built(std::make_unique<nn::Attention>(2, true, 0.0), Shape{6, 8});
        Tensor x = random(Shape{2, 6, 8}, 5);
        const Tensor y0 = layer->forward(x, Mode::eval).clone(MemCategory::activations);
        for (int64_t d = 0; d < 8; ++d) x.data<double>()[(0 * 6 + 3) * 8 + d] += 1.5;
        const Tensor y1 = layer->forward(x, Mode::eval);
        for (int64_t t = 0; t < 6; ++t)
            for (int64_t d = 0; d < 8; ++d) {
                const int64_t k = (0 * 6 + t) * 8 + d;
                if (t < 3) {
                    EXPECT_EQ(y0.data<double>()[k], y1.data<double>()[k]) << "position " << t;
                } else if (t == 3) {
                    EXPECT_NE(y0.data<double>()[k], y1.data<double>()[k]) << "position " << t;
                }
            }
        // The other sequence of the batch is untouched at every position.
        for (int64_t k = 6 * 8; k < 2 * 6 * 8; ++k) EXPECT_EQ(y0.data<double>()[k], y1.data<double>()[k]);
    }
    // Without the mask, an earlier position does see the change.
    auto full = built(std::make_unique<nn::Attention>(2, false, 0.0), Shape{6, 8});
    Tensor x = random(Shape{1, 6, 8}, 5);
    const Tensor y0 = full->forward(x, Mode::eval).clone(MemCategory::activations);
    x.data<double>()[3 * 8] += 1.5;
    const Tensor y1 = full->forward(x, Mode::eval);
    EXPECT_NE(y0.data<double>()[0], y1.data<double>()[0]);
}

TEST_F(TransformerTest, ParameterCountsAreTheFormulas) {
    const int64_t D = 128, ffn = 512;
    auto attn = built(std::make_unique<nn::Attention>(4, true, 0.0), Shape{64, D});
    EXPECT_EQ(attn->parameter_count(), 4 * D * D + 4 * D);
    auto block = built(std::make_unique<nn::TransformerBlock>(4, ffn, 0.1, true), Shape{64, D});
    EXPECT_EQ(block->parameter_count(), 4 * D + (4 * D * D + 4 * D) + (2 * D * ffn + ffn + D));
    auto pos = built(std::make_unique<nn::PositionEmbedding>(), Shape{64, D});
    EXPECT_EQ(pos->parameter_count(), 64 * D);
    // The attention probabilities [H, T, T] count as activations.
    EXPECT_GE(attn->activations_per_sample(), 4 * 64 * 64 + 3 * 64 * D);
}

// The fused kernel keeps each row's log-sum-exp where the materialized one keeps [H, T, T]: its
// memory over a training step grows as T (doubling T doubles it), the materialized kernel's
// nearly fourfold.
TEST_F(TransformerTest, FusedAttentionMemoryGrowsLinearlyInTheSequence) {
    const int64_t D = 16, H = 2, B = 2;
    const auto step_bytes = [&](nn::AttentionKernel kernel, int64_t T) {
        auto layer = built(std::make_unique<nn::Attention>(
                               nn::AttentionOptions{H, 0, true, 0.0, false, 10000.0, true, kernel}),
                           Shape{T, D});
        const Tensor x = random(Shape{B, T, D}, 5), dy = random(Shape{B, T, D}, 6);
        m_device->allocator().reset_peak();
        const int64_t before = m_device->allocator().stats().current_total;
        layer->forward(x, Mode::train);
        layer->backward(dy);
        return m_device->allocator().stats().peak_total - before;
    };
    const double fused = static_cast<double>(step_bytes(nn::AttentionKernel::fused, 512)) /
                         static_cast<double>(step_bytes(nn::AttentionKernel::fused, 256));
    const double materialized = static_cast<double>(step_bytes(nn::AttentionKernel::materialized, 512)) /
                                static_cast<double>(step_bytes(nn::AttentionKernel::materialized, 256));
    EXPECT_LT(fused, 2.1);
    EXPECT_GT(materialized, 3.5);
    auto fused_layer = built(std::make_unique<nn::Attention>(H, true, 0.0), Shape{512, D});
    EXPECT_EQ(static_cast<nn::Attention&>(*fused_layer).saved_per_sample(), H * 512 + 3 * 512 * D);
}

TEST_F(TransformerTest, FusedAttentionWithDropoutIsRefusedAtItsKernel) {
    try {
        nn::Attention a(nn::AttentionOptions{2, 0, true, 0.1, false, 10000.0, true, nn::AttentionKernel::fused});
        FAIL() << "fused attention with dropout was accepted";
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("kernel"), std::string::npos) << e.what();
    }
    // Unasked, dropout chooses the materialized kernel.
    EXPECT_FALSE(nn::Attention(int64_t{2}, true, 0.1).fused());
    EXPECT_TRUE(nn::Attention(int64_t{2}, true, 0.0).fused());
}

TEST_F(TransformerTest, InitialisationIsPytorchsDefault) {
    auto pos = built(std::make_unique<nn::PositionEmbedding>(), Shape{64, 32});
    double sum = 0, sq = 0;
    const auto w = pos->parameters().front()->value.span<double>();
    for (double v : w) sum += v, sq += v * v;
    const double n = static_cast<double>(w.size());
    EXPECT_NEAR(sum / n, 0.0, 0.1);
    EXPECT_NEAR(sq / n, 1.0, 0.1);  // N(0, 1)
    auto block = built(std::make_unique<nn::TransformerBlock>(2, 16, 0.0, true), Shape{4, 8});
    const auto params = block->parameters();
    ASSERT_EQ(params.size(), 12u);  // ln1 w b, qkv w b, proj w b, ln2 w b, fc w b, out w b
    for (double v : params[0]->value.span<double>()) EXPECT_EQ(v, 1.0);  // LayerNorm weight
    for (double v : params[1]->value.span<double>()) EXPECT_EQ(v, 0.0);  // LayerNorm bias
    for (double v : params[2]->value.span<double>()) EXPECT_LE(std::abs(v), 1 / std::sqrt(8.0));
    for (double v : params[8]->value.span<double>()) EXPECT_LE(std::abs(v), 1 / std::sqrt(8.0));   // fc: in D
    for (double v : params[10]->value.span<double>()) EXPECT_LE(std::abs(v), 1 / std::sqrt(16.0));  // out: in ffn
}

TEST_F(TransformerTest, HeadsThatDoNotDivideTheWidthAreRefusedByPath) {
    for (const bool block : {false, true}) {
        std::unique_ptr<nn::Layer> layer;
        if (block) layer = std::make_unique<nn::TransformerBlock>(5, 16, 0.0, true);
        else layer = std::make_unique<nn::Attention>(5, true, 0.0);
        layer->set_label("model.layers[2] (" + layer->type() + ")", "model.layers[2]");
        try {
            layer->build(Shape{8, 128}, DType::f32, *m_device);
            FAIL() << "heads 5 over width 128 built";
        } catch (const ShapeError& e) {
            EXPECT_EQ(e.path(), "model.layers[2]");
            EXPECT_NE(std::string(e.what()).find("model.layers[2].heads = 5 does not divide the width D = 128"),
                      std::string::npos)
                << e.what();
        }
    }
    auto flat = std::make_unique<nn::Attention>(2, true, 0.0);
    EXPECT_THROW(flat->build(Shape{16}, DType::f32, *m_device), ShapeError);
}

TEST_F(TransformerTest, PerPositionCrossEntropyIsTheMeanOverPositions) {
    // Two samples, three positions, four classes: the loss is the mean of the six rows'.
    Tensor logits = random(Shape{2, 3, 4}, 9);
    Tensor target = Tensor::empty(Shape{2, 3}, DType::f64, *m_device, MemCategory::activations);
    const double ids[] = {0, 3, 1, 2, 2, 0};
    for (int k = 0; k < 6; ++k) target.data<double>()[k] = ids[k];
    nn::CrossEntropyLoss per_position;
    const double loss = per_position.forward(logits, target);
    nn::CrossEntropyLoss rows;
    const double flat = rows.forward(logits.reshape(Shape{6, 4}), target.reshape(Shape{6}));
    EXPECT_NEAR(loss, flat, 1e-12);
    const Tensor d = per_position.backward(), d_flat = rows.backward();
    ASSERT_EQ(d.shape(), (Shape{2, 3, 4}));
    for (int64_t k = 0; k < d.numel(); ++k) EXPECT_NEAR(d.data<double>()[k], d_flat.data<double>()[k], 1e-15);
    EXPECT_EQ(nn::count_correct(logits, target), nn::count_correct(logits.reshape(Shape{6, 4}), target.reshape(Shape{6})));
    Tensor wrong = Tensor::zeros(Shape{2, 4}, DType::f64, *m_device, MemCategory::activations);
    EXPECT_THROW(per_position.forward(logits, wrong), ShapeError);
}

nn::LayerSpec spec(std::string type) {
    nn::LayerSpec s;
    s.type = std::move(type);
    return s;
}

// The char-GPT of resources/examples/gpt-char.paralab.json, counted by hand:
//   embedding 256*128 + positions 64*128 + 4 blocks of (4*128 + 4*128^2 + 4*128 + 2*128*512 + 512 + 128)
//   + final layernorm 2*128 + head 128*256 + 256.
TEST(TransformerModel, RepeatMakesCopiesWithTheirOwnParametersAndOneSummaryRow) {
    auto dev = make_cpu_device(0);
    nn::LayerSpec emb = spec("embedding");
    emb.vocab = 256;
    emb.dim = 128;
    nn::LayerSpec block = spec("transformer_block");
    block.heads = 4;
    block.ffn = 512;
    block.repeat = 4;
    nn::LayerSpec head = spec("linear");
    head.out = 256;
    nn::Model m({emb, spec("position_embedding"), block, spec("layernorm"), head}, Shape{64}, "cross_entropy",
                DType::f32, *dev);
    const int64_t per_block = 4 * 128 + (4 * 128 * 128 + 4 * 128) + (2 * 128 * 512 + 512 + 128);
    const int64_t want = 256 * 128 + 64 * 128 + 4 * per_block + 2 * 128 + 128 * 256 + 256;
    EXPECT_EQ(per_block, 198'272);
    EXPECT_EQ(want, 867'328);
    EXPECT_EQ(m.parameter_count(), want);
    EXPECT_EQ(m.net().size(), 8u);  // the block four times
    const auto rows = m.summary();
    ASSERT_EQ(rows.size(), 5u);
    EXPECT_EQ(rows[2].path, "model.layers[2]");
    EXPECT_EQ(rows[2].copies, 4);
    EXPECT_EQ(rows[2].parameters, 4 * per_block);
    EXPECT_EQ(rows[4].output, (Shape{64, 256}));
    // Each copy has its own parameters, and its own label.
    EXPECT_NE(m.net().at(2).parameters().front(), m.net().at(3).parameters().front());
    EXPECT_EQ(m.net().at(3).label(), "model.layers[2] (transformer_block 2 of 4)");
}

// Inside a residual a repeated layer is one row too, under its own path.
TEST(TransformerModel, RepeatInsideAResidualIsOneRowUnderItsPath) {
    auto dev = make_cpu_device(0);
    nn::LayerSpec lin = spec("linear");
    lin.out = 4;
    lin.repeat = 3;
    nn::LayerSpec res = spec("residual");
    res.layers = {lin, spec("relu")};
    nn::Model m({res}, Shape{4}, "mse", DType::f32, *dev);
    const auto rows = m.summary();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[1].path, "model.layers[0].layers[0]");
    EXPECT_EQ(rows[1].copies, 3);
    EXPECT_EQ(rows[1].parameters, 3 * (4 * 4 + 4));
    EXPECT_EQ(rows[2].path, "model.layers[0].layers[1]");
    EXPECT_EQ(rows[2].type, "relu");
    EXPECT_EQ(rows[0].parameters, 60);
}

}  // namespace
