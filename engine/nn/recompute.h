// Activation recomputation (train.recompute): trading compute for memory, as Megatron-LM and
// torch.utils.checkpoint do.
//   selective: attention keeps q, k, v and recomputes its scores and softmax in backward (the
//              T^2-per-head tensors, Korthikanti et al. 2022);
//   full:      each top-level layer of the model (each transformer block, each copy of a
//              repeated layer) keeps only its input; its forward runs again, layer by layer,
//              just before its backward.
// A recomputed forward is the same computation on the same values (dropout masks are a
// function of the random state, not of a draw), so gradients are bit for bit those of a run
// without recomputation; batch norm's running statistics are not moved a second time.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace paralab::nn {

enum class Recompute { none, selective, full };

// "none", "selective", "full" (the experiment file's train.recompute) and back; another name
// throws ConfigError naming `key`.
const char* recompute_name(Recompute r);
Recompute recompute_from_name(const std::string& name, const std::string& key = "train.recompute");

// The calling thread hears of each recomputation's interval (the timeline's "recompute"
// phase, inside backward): a rank thread sets its listener; empty: nobody listens.
using RecomputeListener =
    std::function<void(std::chrono::steady_clock::time_point b, std::chrono::steady_clock::time_point e)>;
void set_recompute_listener(RecomputeListener listener);

// True on this thread while a recomputation runs (batch norm then leaves its running
// statistics alone).
bool recomputing();

// Marks a recomputation on this thread from construction to destruction and tells the listener.
class RecomputeScope {
public:
    RecomputeScope();
    ~RecomputeScope();
    RecomputeScope(const RecomputeScope&) = delete;
    RecomputeScope& operator=(const RecomputeScope&) = delete;

private:
    std::chrono::steady_clock::time_point m_begin;
    bool m_outer;
};

}  // namespace paralab::nn
