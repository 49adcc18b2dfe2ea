// A mixture-of-experts model under the strategies (docs/experiment-format.md, "Today's models"):
// ddp ends with the single device's parameters when the auxiliary losses are 0 (they are per
// micro-batch per replica, so with them on it does not, by definition); tensor_parallel and
// hybrid's tp split every expert and keep the router whole, and end there with the auxiliary
// losses on (every tensor rank routes the same tokens); sequence parallelism is refused at the
// key. The steps' records carry each layer's tokens per expert, summed over the replicas and
// counted once per tensor group, the dropped tokens and the auxiliary loss.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "strategy_testing.h"

using namespace paralab;
using namespace strategy_testing;

namespace {

const std::string& corpus() {
    static const std::string path = text_corpus("moe", "Route each token to two experts; one shared sees them all.", 120);
    return path;
}

constexpr int64_t kB = 4, kT = 8;

// The tiny char model of the strategy tests with Llama blocks whose MLP is 4 SwiGLU experts of
// width 8, top 2, one shared expert.
json tiny_moe(double aux_loss, double capacity_factor = 0) {
    json j = tiny_gpt("moe", corpus());
    j["model"]["layers"] = json::parse(R"([
          {"type": "embedding", "vocab": 256, "dim": 16},
          {"type": "transformer_block", "heads": 4, "kv_heads": 2, "position": "rope", "norm": "rmsnorm",
           "mlp": "moe", "experts": 4, "top_k": 2, "expert_ffn": 8, "shared_experts": 1, "bias": false,
           "repeat": 2},
          {"type": "rmsnorm"}, {"type": "linear", "out": 256, "bias": false}])");
    j["model"]["layers"][1]["aux_loss"] = aux_loss;
    j["model"]["layers"][1]["router_z_loss"] = aux_loss / 10;
    if (capacity_factor > 0) j["model"]["layers"][1]["capacity_factor"] = capacity_factor;
    return j;
}

// The steps over all devices.
class StepRecords : public run::RunObserver {
public:
    void on_step_end(const config::StepRecord& r) override { steps.push_back(r); }
    std::vector<config::StepRecord> steps;
};

struct Trained {
    Result result;
    std::vector<config::StepRecord> steps;
};

Trained train(const json& j, int devices, const json& strategy) {
    StepRecords records;
    Trained t{run_it(with_strategy(j, devices, strategy), &records), {}};
    t.steps = std::move(records.steps);
    return t;
}

void expect_same_parameters(const Trained& want, const Trained& got) {
    ASSERT_EQ(want.result.summary.status, "finished") << want.result.summary.error;
    ASSERT_EQ(got.result.summary.status, "finished") << got.result.summary.error;
    ASSERT_FALSE(want.result.artifacts.parameters.empty());
    EXPECT_LE(max_rel_diff(want.result.artifacts.parameters, got.result.artifacts.parameters), 1e-5);
    EXPECT_NEAR(want.result.summary.final_loss, got.result.summary.final_loss, 1e-5 * (1 + want.result.summary.final_loss));
}

// Every step routes B T k assignments per layer (dropless: all computed).
void expect_every_token_routed(const Trained& t, int64_t dropped_at_least = 0) {
    ASSERT_EQ(t.steps.size(), 5u);
    for (const config::StepRecord& r : t.steps) {
        ASSERT_EQ(r.moe.size(), 2u) << "step " << r.step;
        EXPECT_LT(r.moe[0].layer, r.moe[1].layer);
        for (const config::MoERecord& m : r.moe) {
            ASSERT_EQ(m.tokens_per_expert.size(), 4u);
            const int64_t kept = std::accumulate(m.tokens_per_expert.begin(), m.tokens_per_expert.end(), int64_t{0});
            EXPECT_EQ(kept + m.dropped_tokens, kB * kT * 2) << m.layer << " step " << r.step;
            EXPECT_GE(m.dropped_tokens, dropped_at_least);
        }
    }
}

TEST(MoEStrategies, DdpMatchesSingleWithoutAuxiliaryLosses) {
    const Trained single = train(tiny_moe(0), 1, {{"type", "single"}});
    const Trained ddp = train(tiny_moe(0), 2, {{"type", "ddp"}});
    expect_same_parameters(single, ddp);
    expect_every_token_routed(single);
    expect_every_token_routed(ddp);  // the two replicas' counts summed
    for (const config::StepRecord& r : ddp.steps) EXPECT_EQ(r.moe[0].aux_loss, 0.0);
}

// With the auxiliary losses on, each replica's are its own tokens': not the single device's.
TEST(MoEStrategies, DdpAuxiliaryLossesArePerReplica) {
    const Trained single = train(tiny_moe(0.5), 1, {{"type", "single"}});
    const Trained ddp = train(tiny_moe(0.5), 2, {{"type", "ddp"}});
    ASSERT_EQ(ddp.result.summary.status, "finished") << ddp.result.summary.error;
    EXPECT_GT(max_rel_diff(single.result.artifacts.parameters, ddp.result.artifacts.parameters), 1e-6);
    for (const config::StepRecord& r : ddp.steps)
        for (const config::MoERecord& m : r.moe) {
            EXPECT_GT(m.aux_loss, 0.0);
            EXPECT_GT(m.router_z_loss, 0.0);
        }
    // The first step routes the same tokens with the same parameters on both; the replicas'
    // balance losses, each over its half and weighted by half, are not the whole batch's.
    EXPECT_GT(std::abs(single.steps[0].moe[0].aux_loss - ddp.steps[0].moe[0].aux_loss), 1e-9);
    // The z-loss is a mean over tokens: halves weighted by half are the whole's.
    EXPECT_NEAR(single.steps[0].moe[0].router_z_loss, ddp.steps[0].moe[0].router_z_loss,
                1e-5 * single.steps[0].moe[0].router_z_loss);
}

TEST(MoEStrategies, TensorParallelMatchesSingleWithAuxiliaryLosses) {
    const Trained single = train(tiny_moe(0.5), 1, {{"type", "single"}});
    const Trained tp = train(tiny_moe(0.5), 2, {{"type", "tensor_parallel"}});
    expect_same_parameters(single, tp);
    expect_every_token_routed(tp);  // counted once, not per tensor rank
    for (size_t s = 0; s < tp.steps.size(); ++s)
        EXPECT_NEAR(tp.steps[s].moe[1].aux_loss, single.steps[s].moe[1].aux_loss, 1e-5);
    const Trained hybrid = train(tiny_moe(0), 4, {{"type", "hybrid"}, {"dp", 2}, {"tp", 2}});
    expect_same_parameters(train(tiny_moe(0), 1, {{"type", "single"}}), hybrid);
    expect_every_token_routed(hybrid);
}

TEST(MoEStrategies, CapacityDropsAreRecorded) {
    // Capacity ceil(0.5 * 32 * 2 / 4) = 8 of the 16 each expert would take if balanced.
    const Trained t = train(tiny_moe(0.01, 0.5), 1, {{"type", "single"}});
    ASSERT_EQ(t.result.summary.status, "finished") << t.result.summary.error;
    expect_every_token_routed(t, 1);
    for (const config::StepRecord& r : t.steps)
        for (const config::MoERecord& m : r.moe)
            for (int64_t n : m.tokens_per_expert) EXPECT_LE(n, 8);
}

TEST(MoEStrategies, SequenceParallelIsRefusedAtTheKey) {
    try {
        run_it(with_strategy(tiny_moe(0), 2, {{"type", "tensor_parallel"}, {"sequence_parallel", true}}));
        ADD_FAILURE() << "the run started";
    } catch (const ConfigError& err) {
        EXPECT_EQ(err.path(), "model.layers[1].mlp");
        EXPECT_NE(std::string(err.what()).find("sequence_parallel"), std::string::npos) << err.what();
    }
}

}  // namespace
