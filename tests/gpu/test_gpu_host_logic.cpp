// The host-side logic of the CUDA kernels, proven here without a GPU: the dropout decision the
// kernel makes (kernels/cuda/dropout_draw.cuh) against the engine's hash_uniform draw, and the
// multi-tensor packing (kernels/cuda/multi_tensor.cuh) that every fused optimizer step, global
// norm and loss-scale check launches through: each element of each tensor in exactly one
// block, within the kernel-argument limits.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "engine/util/rng.h"
#include "kernels/cuda/dropout_draw.cuh"
#include "kernels/cuda/multi_tensor.cuh"

using namespace paralab;
namespace kd = paralab::kernels::gpu::detail;

TEST(GpuHostLogic, DropoutDecisionIsTheEngineDrawBitForBit) {
    const double p_values[] = {0.0,  1e-12, 0.1, 0.25, 0.5, 0.9, 0.999999,
                               std::nextafter(0.5, 0.0), std::nextafter(0.5, 1.0),
                               std::nextafter(1.0, 0.0)};
    std::mt19937_64 gen(7);
    for (double p : p_values) {
        const uint64_t threshold = kd::dropout_keep_threshold(p);
        for (int key_round = 0; key_round < 4; ++key_round) {
            const uint64_t key = gen();
            int64_t differing = 0;
            for (uint64_t i = 0; i < 250000; ++i) {
                const uint64_t counter = key_round == 3 ? gen() : i;  // dense and scattered
                differing += kd::dropout_keeps(key, counter, threshold) != (hash_uniform(key, counter) >= p);
            }
            EXPECT_EQ(differing, 0) << "p = " << p;
        }
    }
    EXPECT_EQ(kd::dropout_splitmix64(12345), splitmix64(12345));
}

// At the edge: for p on, just below and just above a value hash_uniform can return, the
// integer test on k agrees with the engine's double test u >= p for the draws around it.
TEST(GpuHostLogic, DropoutThresholdAgreesAtTheEdge) {
    for (uint64_t k : {uint64_t{1}, uint64_t{2}, uint64_t{1} << 40, uint64_t{1} << 52, (uint64_t{1} << 53) - 1}) {
        const double u = static_cast<double>(k) * 0x1.0p-53;
        for (double p : {std::nextafter(u, 0.0), u, std::nextafter(u, 1.0)}) {
            if (!(p < 1.0)) continue;
            const uint64_t threshold = kd::dropout_keep_threshold(p);
            for (uint64_t j : {k - 1, k, k + 1}) {
                const bool engine_keeps = static_cast<double>(j) * 0x1.0p-53 >= p;
                EXPECT_EQ(j >= threshold, engine_keeps) << "k " << k << ", p " << p << ", draw " << j;
            }
        }
    }
}

namespace {
// Replays a packing: for each launch, each block's (tensor, chunk), checking the limits, and
// counts how often every element of every tensor is covered.
struct Coverage {
    std::vector<std::vector<int>> hits;  // hits[t][i]
    int64_t launches = 0, blocks = 0;
    bool first_block_consistent = true;
    bool within_limits = true;
};

Coverage replay(const std::vector<int64_t>& sizes, int64_t chunk) {
    Coverage cov;
    for (int64_t n : sizes) cov.hits.emplace_back(static_cast<size_t>(n), 0);
    // Tensor k's "pointer" is its index (+1, so that no pointer is null) in both lists.
    std::vector<void*> ptrs(sizes.size()), others(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) {
        ptrs[k] = reinterpret_cast<void*>(k + 1);
        others[k] = reinterpret_cast<void*>(k + 1001);
    }
    const std::array<void* const*, 2> lists{ptrs.data(), others.data()};
    const int64_t total = kd::for_each_tensor_chunk<2>(
        static_cast<int64_t>(sizes.size()), lists, sizes.data(), chunk,
        [&](const kd::TensorList<2>& list, int blocks) {
            if (list.first_block != cov.blocks) cov.first_block_consistent = false;
            if (blocks < 1 || blocks > kd::kListBlocks) cov.within_limits = false;
            for (int b = 0; b < blocks; ++b) {
                const int slot = list.block_tensor[b];
                if (slot >= kd::kListTensors) cov.within_limits = false;
                const auto t = reinterpret_cast<uintptr_t>(list.ptr[0][slot]) - 1;
                if (reinterpret_cast<uintptr_t>(list.ptr[1][slot]) != t + 1001 ||
                    list.size[slot] != sizes[t])
                    cov.within_limits = false;
                const int64_t begin = static_cast<int64_t>(list.block_chunk[b]) * chunk;
                const int64_t end = std::min(begin + chunk, list.size[slot]);
                for (int64_t i = begin; i < end; ++i) ++cov.hits[t][static_cast<size_t>(i)];
            }
            ++cov.launches;
            cov.blocks += blocks;
        });
    EXPECT_EQ(total, cov.blocks);
    return cov;
}
}  // namespace

TEST(GpuHostLogic, MultiTensorPackingCoversEveryElementOnce) {
    const int64_t chunk = 64;  // small chunks: many blocks from small tensors
    std::mt19937_64 gen(11);
    const std::vector<std::vector<int64_t>> cases{
        {},                                        // nothing
        {0, 0},                                    // only empty tensors
        {1},
        {64, 65, 0, 127, 128, 129},
        std::vector<int64_t>(100, 10),             // more tensors than one launch holds (36)
        {64 * 1000 + 3},                           // one tensor over three launches (320 blocks)
        {5, 64 * 700, 7, 64 * 320, 64 * 319 + 1, 3},  // a tensor straddling launches mid-list
    };
    for (const auto& sizes : cases) {
        SCOPED_TRACE("case of " + std::to_string(sizes.size()) + " tensors");
        const Coverage cov = replay(sizes, chunk);
        EXPECT_TRUE(cov.first_block_consistent);
        EXPECT_TRUE(cov.within_limits);
        for (size_t t = 0; t < sizes.size(); ++t)
            for (size_t i = 0; i < cov.hits[t].size(); ++i)
                ASSERT_EQ(cov.hits[t][i], 1) << "tensor " << t << " element " << i;
    }
    // Random model-like lists.
    for (int round = 0; round < 20; ++round) {
        std::vector<int64_t> sizes(1 + gen() % 120);
        for (auto& n : sizes) n = static_cast<int64_t>(gen() % 3 == 0 ? gen() % 50000 : gen() % 300);
        const Coverage cov = replay(sizes, chunk);
        EXPECT_TRUE(cov.first_block_consistent && cov.within_limits);
        for (size_t t = 0; t < sizes.size(); ++t)
            for (int h : cov.hits[t]) ASSERT_EQ(h, 1) << "round " << round << " tensor " << t;
    }
}

// sum_of_squares_multi's groups of 256 tensors must never make more partial sums than the
// 1024-slot scratch holds, whatever their sizes.
TEST(GpuHostLogic, NormChunksFitTheReductionScratch) {
    std::mt19937_64 gen(13);
    for (int round = 0; round < 200; ++round) {
        std::vector<int64_t> sizes(1 + gen() % 256);
        for (auto& n : sizes) {
            switch (gen() % 4) {
                case 0: n = 0; break;
                case 1: n = static_cast<int64_t>(gen() % 5000); break;
                case 2: n = static_cast<int64_t>(gen() % 5000000); break;
                default: n = static_cast<int64_t>(gen() % (int64_t{1} << 34)); break;  // up to 16 G
            }
        }
        int64_t total = 0;
        for (int64_t n : sizes) total += n;
        const int64_t chunk = kd::chunk_to_fit(total, static_cast<int64_t>(sizes.size()), 1024, 4096);
        int64_t chunks = 0;
        for (int64_t n : sizes) chunks += (n + chunk - 1) / chunk;
        ASSERT_LE(chunks, 1024) << "round " << round;
        ASSERT_GE(chunk, 4096);
    }
}

TEST(GpuHostLogic, TensorListFitsTheKernelArgumentLimit) {
    // 4 KB is the argument limit every CUDA version and GPU accepts; the Adam step's list (four
    // lists) plus its hyper-parameters (9 doubles) must fit.
    EXPECT_LE(sizeof(kd::TensorList<4>) + 9 * sizeof(double), size_t{4096});
}
