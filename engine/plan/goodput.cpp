#include "engine/plan/goodput.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "engine/plan/planner.h"
#include "engine/util/error.h"

namespace paralab::plan {

double goodput_at(double tau, double checkpoint_s, double restart_s, double mtbf_s) {
    if (tau <= 0 || mtbf_s <= 0) return 0;
    // expm1 keeps the small exponents of a rare failure exact.
    const double wall_per_solve =
        mtbf_s * std::exp(restart_s / mtbf_s) * std::expm1((tau + checkpoint_s) / mtbf_s) / tau;
    return std::isfinite(wall_per_solve) && wall_per_solve > 0 ? 1.0 / wall_per_solve : 0.0;
}

double daly_interval(double checkpoint_s, double mtbf_s) {
    if (checkpoint_s >= 2 * mtbf_s) return mtbf_s;
    const double r = checkpoint_s / (2 * mtbf_s);
    return std::sqrt(2 * checkpoint_s * mtbf_s) * (1 + std::sqrt(r) / 3 + r / 9) - checkpoint_s;
}

void check_goodput_inputs(const GoodputInputs& in) {
    if (!(in.failure_rate_per_gpu_hour > 0) || !std::isfinite(in.failure_rate_per_gpu_hour))
        throw ConfigError("--failure-rate",
                          "expected a failure rate per GPU-hour above 0 (Llama 3's run: 419 "
                          "failures / (16,384 GPUs × 1,296 h) = 1.97e-5)");
    if (!(in.storage_bytes_per_s > 0) || !std::isfinite(in.storage_bytes_per_s))
        throw ConfigError("--storage-gbps", "expected the storage's write bandwidth in GB/s, above 0");
    if (!(in.restart_s >= 0) || !std::isfinite(in.restart_s))
        throw ConfigError("--restart-s", "expected the restart time in seconds, 0 or more");
    if (!(in.tokens >= 0) || !std::isfinite(in.tokens))
        throw ConfigError("--tokens", "expected a number of tokens above 0");
    if (in.price_per_gpu_hour && !(*in.price_per_gpu_hour >= 0))
        throw ConfigError("--price-per-gpu-hour", "expected a price of 0 or more");
}

Goodput goodput_of(const Prediction& p, const GoodputInputs& in) {
    check_goodput_inputs(in);
    Goodput g;
    g.checkpoint_bytes = p.checkpoint_bytes;
    g.checkpoint_write_s = p.checkpoint_bytes / in.storage_bytes_per_s;
    g.mtbf_s = 3600.0 / (in.failure_rate_per_gpu_hour * p.devices);
    g.checkpoint_interval_s = daly_interval(g.checkpoint_write_s, g.mtbf_s);
    g.goodput = goodput_at(g.checkpoint_interval_s, g.checkpoint_write_s, in.restart_s, g.mtbf_s);
    if (in.tokens > 0 && p.tokens_per_s > 0 && g.goodput > 0) {
        g.time_to_train_s = in.tokens / p.tokens_per_s / g.goodput;
        if (in.price_per_gpu_hour)
            g.cost = g.time_to_train_s / 3600.0 * p.devices * *in.price_per_gpu_hour;
    }
    return g;
}

void add_goodput_json(nlohmann::json& out, const Goodput& g, const GoodputInputs& in) {
    out["goodput"] = g.goodput;
    out["checkpoint_interval_s"] = g.checkpoint_interval_s;
    out["checkpoint_bytes"] = g.checkpoint_bytes;
    out["checkpoint_write_s"] = g.checkpoint_write_s;
    out["mtbf_s"] = g.mtbf_s;
    if (in.tokens > 0) out["time_to_train_s"] = g.time_to_train_s;
    if (g.cost) out["cost"] = *g.cost;
}

}  // namespace paralab::plan
