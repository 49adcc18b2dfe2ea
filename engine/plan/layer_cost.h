// One layer's time and memory for one micro-batch on one device (docs/planner.md, "Compute"
// and "Memory per device"): a roofline with a GEMM-efficiency curve, Korthikanti et al.'s
// activation bytes for transformer layers, the engine's counts for the others.
#pragma once

#include <cstdint>

#include "engine/plan/cluster.h"
#include "engine/plan/mesh.h"
#include "engine/plan/plan_model.h"

namespace paralab::plan {

// One layer's costs for one micro-batch on one device.
struct LayerCost {
    double forward_s = 0;    // compute
    double selective_s = 0;  // recomputing attention scores and softmax
    double tp_forward_s = 0, tp_backward_s = 0, tp_recompute_s = 0;
    double stored_bytes = 0;  // held for backward, under the recompute mode
    double full_bytes = 0;    // held for backward without recomputation (a layer being recomputed)
    double parameters = 0;    // on this device
    double gather_parameters = 0;  // the whole layer's (zero-3's gather)
};

struct LayerContext {
    const Cluster& c;
    const Mesh& mesh;
    double peak = 0;
    double act_bytes = 2;  // bytes per activation number (2 in 16-bit, 4 in fp32)
    int64_t b = 1;         // rows per micro-batch
    double efficiency(double width) const {
        return c.gemm_fraction(mesh.precision, width);
    }
    // The stack's compute efficiency scales every compute time (docs/planner.md, "Stacks").
    double gemm_s(double flops, double width) const {
        return flops <= 0 ? 0 : flops / (peak * efficiency(width) * c.stack.compute_efficiency);
    }
    double attention_s(double flops, double head_dim) const {
        return flops <= 0 ? 0
                          : flops / (peak * c.fused_attention_fraction(head_dim) *
                                     c.stack.compute_efficiency);
    }
    double memory_s(double bytes) const {
        return bytes <= 0 ? 0 : bytes / (c.memory_bandwidth * c.stack.compute_efficiency);
    }
};

// A transformer layer (attention, transformer_block) whose input holds `input_numel` numbers
// per sample: its GEMMs at the efficiency of their smallest dimension, its elementwise work by
// the bytes it moves, its tensor-parallel all-reduces.
LayerCost transformer_cost(const PlanLayer& l, int64_t input_numel, const LayerContext& x);
// Any other layer: max(FLOPs at peak · eff, bytes at the memory bandwidth); the embedding and
// the output linear split tp ways by vocabulary.
LayerCost other_cost(const PlanLayer& l, int64_t input_numel, const LayerContext& x);

}  // namespace paralab::plan
