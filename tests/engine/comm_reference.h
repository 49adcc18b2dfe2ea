// The reference the communicator tests share (tests/engine/test_comm.cpp for the local
// backend, tests/mpi/test_mpi_comm.cpp for MPI): deterministic inputs per rank, the reduction
// in double, and the rounding bound a backend's result must meet.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/data/loader.h"

namespace comm_reference {

using paralab::DType;
using paralab::comm::Communicator;
using paralab::comm::ReduceOp;
using paralab::dtype_of;

// Element i of rank r in [-1, 1), for test case `salt`.
inline double input_value(uint64_t salt, int rank, int64_t i) {
    uint64_t z =
        salt * 0x9E3779B97F4A7C15ull + uint64_t(rank) * 0xBF58476D1CE4E5B9ull + uint64_t(i);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-52 - 1.0;
}

// inputs[r][i]: element i of rank r, in [-1, 1). Every rank makes all ranks' inputs, so that it
// can compute the reference itself.
template <class T>
inline std::vector<std::vector<T>> make_inputs(uint64_t salt, int world, int64_t count) {
    std::vector<std::vector<T>> inputs(static_cast<size_t>(world),
                                       std::vector<T>(static_cast<size_t>(count)));
    for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < count; ++i)
            inputs[size_t(r)][size_t(i)] = T(input_value(salt, r, i));
    return inputs;
}

template <class T>
inline void reference(const std::vector<std::vector<T>>& inputs, int64_t i, ReduceOp op, double* value,
               double* magnitude) {
    double sum = 0, abs_sum = 0, max = -INFINITY;
    for (const auto& in : inputs) {
        sum += double(in[size_t(i)]);
        abs_sum += std::fabs(double(in[size_t(i)]));
        max = std::max(max, double(in[size_t(i)]));
    }
    const double n = double(inputs.size());
    *value = op == ReduceOp::max ? max : op == ReduceOp::average ? sum / n : sum;
    *magnitude = op == ReduceOp::average ? abs_sum / n : abs_sum;
}

constexpr double epsilon_of(DType dtype) {
    return dtype == DType::f32 ? 0x1.0p-23 : 0x1.0p-52;
}

// result[i] within the rounding of N additions in T of the exact reduction (slack 1), or of
// another backend's result, itself that close (slack 2).
template <class T>
inline void expect_reduced(const std::vector<T>& result, const std::vector<std::vector<T>>& inputs,
                    ReduceOp op, int64_t first = 0, int64_t last = -1,
                    const std::vector<T>* other = nullptr, double slack = 1) {
    if (last < 0) last = int64_t(result.size());
    const double n = double(inputs.size());
    int failures = 0;
    for (int64_t i = first; i < last && failures < 5; ++i) {
        double want, magnitude;
        reference(inputs, i, op, &want, &magnitude);
        if (other != nullptr) want = double((*other)[size_t(i)]);
        const double tol =
            op == ReduceOp::max ? 0.0 : slack * (n + 1) * epsilon_of(dtype_of<T>()) * magnitude;
        if (std::fabs(double(result[size_t(i)]) - want) > tol) {
            ++failures;
            ADD_FAILURE() << "element " << i << ": got " << result[size_t(i)] << ", want " << want;
        }
    }
}

template <class T>
inline bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    // memcmp of empty vectors would pass null pointers (undefined, UBSan says so).
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

inline int64_t chunk(int64_t count, int c, int world) {
    return paralab::data::shard_of_dataset(count, ((c % world) + world) % world, world).count;
}

inline const char* op_name(ReduceOp op) {
    return op == ReduceOp::sum ? "sum" : op == ReduceOp::average ? "average" : "max";
}

// 200 calls of every kind in a sequence drawn alike on every rank of `c`'s group (roots, counts
// and kinds from one seed; all_to_all included), each checked against the reference: the calls
// must not disturb each other, whatever the backend.
inline void run_mixed_sequence(Communicator& c) {
    const int world = c.world(), r = c.rank();
    std::mt19937 pick(1234);  // the same sequence on every rank
    for (int call = 0; call < 200; ++call) {
        const int kind = int(pick() % 8), root = int(pick() % uint32_t(world));
        const int64_t count = int64_t(pick() % 300);
        SCOPED_TRACE("call " + std::to_string(call) + " kind " + std::to_string(kind));
        const auto inputs = make_inputs<double>(uint64_t(call), world, count);
        auto mine = inputs[size_t(r)];
        if (kind == 0 || kind == 1) {
            const ReduceOp op = kind == 0 ? ReduceOp::sum : ReduceOp::max;
            c.all_reduce(mine.data(), count, DType::f64, op);
            expect_reduced(mine, inputs, op);
        } else if (kind == 2) {
            c.reduce_scatter(mine.data(), count, DType::f64, ReduceOp::average);
            c.all_gather(mine.data(), count, DType::f64);
            expect_reduced(mine, inputs, ReduceOp::average);
        } else if (kind == 3) {
            c.broadcast(mine.data(), count, DType::f64, root);
            EXPECT_TRUE(same_bits(mine, inputs[size_t(root)]));
        } else if (kind == 4) {
            c.reduce(mine.data(), count, DType::f64, ReduceOp::sum, root);
            if (r == root) expect_reduced(mine, inputs, ReduceOp::sum);
        } else if (kind == 5) {
            c.send(mine.data(), count, DType::f64, root, call);
            if (r == root)
                for (int q = 0; q < world; ++q) {
                    c.recv(mine.data(), count, DType::f64, q, call);
                    EXPECT_TRUE(same_bits(mine, inputs[size_t(q)]));
                }
        } else if (kind == 6) {
            c.barrier();
        } else {  // all_to_all: rank s sends rank d (count + s + 2 d) % 7 of its elements
            const auto n = [&](int s, int d) { return (count + s + 2 * d) % 7; };
            std::vector<int64_t> send_counts, recv_counts;
            std::vector<double> send, want;
            for (int q = 0; q < world; ++q) {
                send_counts.push_back(n(r, q));
                recv_counts.push_back(n(q, r));
                for (int64_t i = 0; i < n(r, q); ++i) send.push_back(input_value(uint64_t(call), r, 1000 * q + i));
                for (int64_t i = 0; i < n(q, r); ++i) want.push_back(input_value(uint64_t(call), q, 1000 * r + i));
            }
            std::vector<double> got(want.size(), -2.0);
            c.all_to_all(send.data(), send_counts, got.data(), recv_counts, DType::f64);
            EXPECT_TRUE(same_bits(got, want));
        }
    }
    EXPECT_GE(c.totals().calls, 200);
}

}  // namespace comm_reference
