// The software stack a plan assumes (docs/planner.md, "Stacks"): what a training framework
// adds to or takes from the hardware's figures — the fraction of the cluster's rates its kernels
// reach, the attention kernel it runs when a layer does not say, the precision its gradient
// all-reduce moves and whose memory model its devices follow. Named presets are data,
// resources/plan/stacks.json, each constant with its source, compiled into the program.
#pragma once

#include <string>
#include <vector>

namespace paralab::plan {

struct Stack {
    std::string name = "ideal";
    // Every compute time (GEMMs, memory-bound kernels, the optimizer) is divided by it: launch
    // gaps, framework and data-loading time between kernels, at the scale of a whole step.
    double compute_efficiency = 1.0;
    // The attention kernel: fused (FlashAttention-like: the scores never reach memory) or
    // materialized (the T×T scores written and read); `engine_attention`: as ParaLab's attention
    // layer picks it, fused without attention dropout and materialized with it.
    bool fused_attention = true;
    bool engine_attention = false;
    // The data-parallel gradient all-reduce in fp32 (4 bytes a gradient) instead of the step's
    // 16-bit precision.
    bool grad_reduce_fp32 = false;
    // The memory each device holds: ParaLab's own engine's model (strategy::estimate_memory, the
    // Strategy tab's), or the published per-layer figures of 16-bit frameworks (Korthikanti et
    // al. 2022, planner.cpp).
    bool engine_memory = false;
};

// The preset names, by name.
std::vector<std::string> stack_names();
// A preset by name; throws ConfigError at "--stack" naming the presets for another name.
Stack stack_preset(const std::string& name);
// The presets file's text (resources/plan/stacks.json, compiled in).
const char* stacks_text();

}  // namespace paralab::plan
