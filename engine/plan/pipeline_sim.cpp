#include "engine/plan/pipeline_sim.h"

#include <algorithm>

#include "engine/strategy/stages.h"
#include "engine/util/error.h"

namespace paralab::plan {

PipeResult simulate_pipeline(strategy::stages::Schedule schedule, int stages, int chunks,
                             int micro_batches, const PipeTimes& times, bool record_spans) {
    const int p = stages, v = chunks, m = micro_batches, g_count = p * v;
    PARALAB_CHECK(static_cast<int>(times.forward.size()) == g_count &&
                      static_cast<int>(times.backward.size()) == g_count &&
                      static_cast<int>(times.transfer.size()) == g_count - 1 &&
                      (times.weight.empty() || static_cast<int>(times.weight.size()) == g_count),
                  "simulate_pipeline: one time per chunk and per boundary");
    using strategy::stages::Pass;
    const bool split = strategy::stages::splits_backward(schedule);
    // Per global chunk: a backward's W (0 when the schedule does not split it) and the rest.
    std::vector<double> weight_s(static_cast<size_t>(g_count), 0.0), input_s(times.backward);
    if (split)
        for (size_t g = 0; g < weight_s.size(); ++g) {
            weight_s[g] = times.weight.empty() ? times.backward[g] / 2 : times.weight[g];
            input_s[g] = times.backward[g] - weight_s[g];
        }
    std::vector<std::vector<strategy::stages::Op>> order(static_cast<size_t>(p));
    for (int d = 0; d < p; ++d)
        order[static_cast<size_t>(d)] = strategy::stages::stage_schedule(schedule, d, p, m, v);

    // End time of each (global chunk, micro-batch) forward and backward; < 0: not yet run.
    const auto at = [&](int g, int micro) {
        return static_cast<size_t>(g) * static_cast<size_t>(m) + static_cast<size_t>(micro);
    };
    std::vector<double> fwd_end(static_cast<size_t>(g_count) * static_cast<size_t>(m), -1.0),
        bwd_end(fwd_end);
    std::vector<size_t> next(static_cast<size_t>(p), 0);
    std::vector<double> free_at(static_cast<size_t>(p), 0.0);
    PipeResult result;
    result.busy.assign(static_cast<size_t>(p), 0.0);
    result.peak_in_flight.assign(static_cast<size_t>(p), 0);
    std::vector<int> in_flight(static_cast<size_t>(p), 0);

    // A device runs its next operation as soon as what it waits for has ended; a finished
    // operation wakes the device that waits for it. Each operation is looked at a bounded
    // number of times, so a 64-stage, 512-micro-batch schedule takes milliseconds.
    std::vector<int> ready;
    for (int d = 0; d < p; ++d) ready.push_back(d);
    size_t remaining = 0;
    for (const auto& o : order) remaining += o.size();
    while (!ready.empty()) {
        const int d = ready.back();
        ready.pop_back();
        auto& pos = next[static_cast<size_t>(d)];
        while (pos < order[static_cast<size_t>(d)].size()) {
            const strategy::stages::Op& op = order[static_cast<size_t>(d)][pos];
            const int g = op.chunk * p + d;
            double arrive = 0;
            if (op.pass == Pass::weight) {
                const double own = bwd_end[at(g, op.micro)];
                if (own < 0) break;
                arrive = own;
            } else if (op.forward()) {
                if (g > 0) {
                    const double prev = fwd_end[at(g - 1, op.micro)];
                    if (prev < 0) break;
                    arrive = prev + (times.blocking_sends ? 0 : times.transfer[static_cast<size_t>(g - 1)]);
                }
            } else if (g + 1 < g_count) {
                const double prev = bwd_end[at(g + 1, op.micro)];
                if (prev < 0) break;
                arrive = prev + (times.blocking_sends ? 0 : times.transfer[static_cast<size_t>(g)]);
            } else {
                const double own = fwd_end[at(g, op.micro)];
                if (own < 0) break;
                arrive = own;
            }
            double duration = op.pass == Pass::forward    ? times.forward[static_cast<size_t>(g)]
                              : op.pass == Pass::backward ? input_s[static_cast<size_t>(g)]
                                                          : weight_s[static_cast<size_t>(g)];
            if (times.blocking_sends) {
                if (op.pass == Pass::forward && g + 1 < g_count) duration += times.transfer[static_cast<size_t>(g)];
                if (op.pass == Pass::backward && g > 0) duration += times.transfer[static_cast<size_t>(g - 1)];
            }
            const double start = std::max(free_at[static_cast<size_t>(d)], arrive);
            const double end = start + duration;
            free_at[static_cast<size_t>(d)] = end;
            result.busy[static_cast<size_t>(d)] += duration;
            int& live = in_flight[static_cast<size_t>(d)];
            if (op.pass != Pass::weight) live += op.forward() ? 1 : -1;
            result.peak_in_flight[static_cast<size_t>(d)] =
                std::max(result.peak_in_flight[static_cast<size_t>(d)], live);
            if (op.pass != Pass::weight) (op.forward() ? fwd_end : bwd_end)[at(g, op.micro)] = end;
            result.makespan = std::max(result.makespan, end);
            if (record_spans) result.spans.push_back({d, op, start, end});
            ++pos;
            --remaining;
            // Wake the neighbour that may wait for this operation (a W: none).
            const int waiting = op.pass == Pass::weight ? -1
                                : op.forward()          ? (g + 1 < g_count ? (g + 1) % p : -1)
                                                        : (g > 0 ? (g - 1) % p : -1);
            if (waiting >= 0 && waiting != d) ready.push_back(waiting);
        }
    }
    PARALAB_CHECK(remaining == 0, std::string("simulate_pipeline: the schedule ") +
                                      strategy::stages::schedule_name(schedule) + " deadlocked");
    return result;
}

}  // namespace paralab::plan
