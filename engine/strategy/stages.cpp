#include "engine/strategy/stages.h"

#include "engine/device/gpu_values.h"

#include <algorithm>
#include <limits>

#include "engine/device/device.h"
#include "engine/optim/clip.h"
#include "engine/strategy/pipeline_executor.h"
#include "engine/strategy/registry.h"

namespace paralab::strategy::stages {

// ---- schedules ------------------------------------------------------------------------------

namespace {

// interleaved_1f1b: the forwards of a device in order (groups of p micro-batches, each group
// through chunk 0, then chunk 1, ...; the last group may be smaller), and its backwards (the
// same with the chunks reversed).
std::vector<Op> interleaved_order(int stages, int chunks, int micro_batches, bool forward) {
    std::vector<Op> ops;
    ops.reserve(static_cast<size_t>(micro_batches) * static_cast<size_t>(chunks));
    for (int group = 0; group < micro_batches; group += stages) {
        const int size = std::min(stages, micro_batches - group);
        for (int c = 0; c < chunks; ++c)
            for (int i = 0; i < size; ++i)
                ops.push_back({forward ? Pass::forward : Pass::backward, group + i, forward ? c : chunks - 1 - c});
    }
    return ops;
}

// zb_h1 (the authors' ZB-H1, "exact semantics"): stage s runs 1F1B's p − s − 1 warm-up forwards,
// then s forward-B pairs whose W wait, then forward, B, W in turn while forwards remain, then B
// and W in turn, then the s W still waiting. Every W follows its own B, in micro-batch order.
std::vector<Op> zero_bubble_h1(int stage, int stages, int micro_batches) {
    const int m = micro_batches;
    std::vector<Op> ops;
    ops.reserve(static_cast<size_t>(3 * m));
    int forward = 0, backward = 0, weight = 0;
    for (; forward < std::min(stages - stage - 1, m); ++forward) ops.push_back({Pass::forward, forward});
    for (int i = 0; i < stage && forward < m; ++i) {
        ops.push_back({Pass::forward, forward++});
        ops.push_back({Pass::backward, backward++});
    }
    while (forward < m) {
        ops.push_back({Pass::forward, forward++});
        ops.push_back({Pass::backward, backward++});
        ops.push_back({Pass::weight, weight++});
    }
    while (backward < m) {
        ops.push_back({Pass::backward, backward++});
        ops.push_back({Pass::weight, weight++});
    }
    while (weight < m) ops.push_back({Pass::weight, weight++});
    return ops;
}

}  // namespace

bool splits_backward(Schedule schedule) { return schedule == Schedule::zb_h1; }

std::vector<int> chunk_in_flight(const std::vector<Op>& ops, int chunks) {
    std::vector<int> live(static_cast<size_t>(std::max(1, chunks)), 0), peak(live);
    for (const Op& op : ops) {
        PARALAB_CHECK(op.chunk >= 0 && op.chunk < chunks, "chunk_in_flight: chunk out of range");
        int& n = live[static_cast<size_t>(op.chunk)];
        if (op.pass == Pass::weight) continue;
        n += op.forward() ? 1 : -1;
        peak[static_cast<size_t>(op.chunk)] = std::max(peak[static_cast<size_t>(op.chunk)], n);
    }
    return peak;
}

int contexts_needed(Schedule schedule, int stage, int stages, int micro_batches, int chunks) {
    if (schedule == Schedule::gpipe) return micro_batches;
    if (schedule == Schedule::interleaved_1f1b) {
        const std::vector<int> k = chunk_contexts(schedule, stage, stages, micro_batches, chunks);
        return *std::max_element(k.begin(), k.end());
    }
    return std::max(1, std::min(micro_batches, stages - stage));
}

std::vector<int> flush_parts(Schedule schedule, int stages, int micro_batches) {
    if (schedule != Schedule::interleaved_1f1b || micro_batches <= stages || micro_batches % stages == 0)
        return {micro_batches};
    const int rest = micro_batches % stages;
    return {micro_batches - rest, rest};
}

std::vector<int> chunk_contexts(Schedule schedule, int stage, int stages, int micro_batches, int chunks) {
    if (schedule != Schedule::interleaved_1f1b)
        return std::vector<int>(static_cast<size_t>(std::max(1, chunks)),
                                contexts_needed(schedule, stage, stages, micro_batches));
    // A flush of m' <= m micro-batches runs as flush_parts(m'): multiples of p, whose order
    // for p < m' is a prefix of the largest one's followed by backwards only (so its peak
    // covers them), p itself (every forward first), and fewer than p (every forward first).
    std::vector<int> out(static_cast<size_t>(chunks), 1);
    for (int m : {micro_batches, std::min(micro_batches, stages), std::min(micro_batches, stages - 1)}) {
        if (m < 1) continue;
        for (int part : flush_parts(schedule, stages, m)) {
            const auto peak = chunk_in_flight(stage_schedule(schedule, stage, stages, part, chunks), chunks);
            for (size_t c = 0; c < out.size(); ++c) out[c] = std::max(out[c], peak[c]);
        }
    }
    return out;
}

std::vector<Op> stage_schedule(Schedule schedule, int stage, int stages, int micro_batches, int chunks) {
    std::vector<Op> ops;
    if (schedule == Schedule::interleaved_1f1b) {
        // Megatron-LM's forward_backward_pipelining_with_interleaving (the order the planner
        // simulates too): 2·(p − d − 1) + (v − 1)·p warm-up forwards, then one forward and one
        // backward in turn, then the remaining backwards.
        const int p = stages, v = chunks, m = micro_batches;
        const std::vector<Op> forwards = interleaved_order(p, v, m, true);
        const std::vector<Op> backwards = interleaved_order(p, v, m, false);
        const int total = static_cast<int>(forwards.size());
        const bool textbook = m > p && m % p == 0;
        const int warmup = textbook ? std::min(total, 2 * (p - stage - 1) + (v - 1) * p) : total;
        ops.reserve(2 * forwards.size());
        for (int k = 0; k < warmup; ++k) ops.push_back(forwards[size_t(k)]);
        for (int k = 0; k + warmup < total; ++k) {
            ops.push_back(forwards[size_t(k + warmup)]);
            ops.push_back(backwards[size_t(k)]);
        }
        for (int k = total - warmup; k < total; ++k) ops.push_back(backwards[size_t(k)]);
        return ops;
    }
    if (schedule == Schedule::zb_h1) return zero_bubble_h1(stage, stages, micro_batches);
    ops.reserve(static_cast<size_t>(2 * micro_batches));
    if (schedule == Schedule::gpipe) {
        for (int i = 0; i < micro_batches; ++i) ops.push_back({Pass::forward, i});
        for (int i = micro_batches; i-- > 0;) ops.push_back({Pass::backward, i});
        return ops;
    }
    // 1F1B: stage s starts p - s - 1 micro-batches ahead of the one it runs backward, so the
    // last stage alternates from the start and the first has the most in flight.
    const int warmup = std::min(stages - stage - 1, micro_batches);
    for (int i = 0; i < warmup; ++i) ops.push_back({Pass::forward, i});
    for (int i = 0; i + warmup < micro_batches; ++i) {
        ops.push_back({Pass::forward, i + warmup});
        ops.push_back({Pass::backward, i});
    }
    for (int i = micro_batches - warmup; i < micro_batches; ++i) ops.push_back({Pass::backward, i});
    return ops;
}

// ---- splits ---------------------------------------------------------------------------------

namespace {

// The splits of layers [0, n) into `stages` contiguous stages, each of cost at most `limit`,
// in terms of the prefix sums `prefix` (n + 1 entries): how far a stage starting at i may
// reach, and how few stages can cover a prefix or a suffix. Costs are non-negative, so each
// of these is monotone in the position and found by two pointers.
struct StageReach {
    std::vector<int> reach;  // reach[i]: the largest j with cost(i, j) <= limit (i < n)
    std::vector<int> prefix_min;  // the fewest stages that cover layers [0, p)
    std::vector<int> suffix_min;  // the fewest stages that cover layers [p, n)
};

StageReach stage_reach(const std::vector<int64_t>& prefix, int64_t limit) {
    const int n = static_cast<int>(prefix.size()) - 1;
    StageReach r;
    r.reach.assign(size_t(n) + 1, n);
    for (int i = 0, j = 0; i < n; ++i) {
        j = std::max(j, i);
        while (j < n && prefix[size_t(j) + 1] - prefix[size_t(i)] <= limit) ++j;
        r.reach[size_t(i)] = j;
    }
    r.suffix_min.assign(size_t(n) + 1, 0);
    for (int i = n - 1; i >= 0; --i) r.suffix_min[size_t(i)] = 1 + r.suffix_min[size_t(r.reach[size_t(i)])];
    r.prefix_min.assign(size_t(n) + 1, 0);
    for (int p = 1, back = 0; p <= n; ++p) {
        while (prefix[size_t(p)] - prefix[size_t(back)] > limit) ++back;
        r.prefix_min[size_t(p)] = 1 + r.prefix_min[size_t(back)];
    }
    return r;
}

// The least possible cost of the largest of `stages` stages: the least limit under which the
// greedy split (each stage as long as the limit allows) needs at most `stages` stages. With
// non-negative costs a split into fewer stages can be cut further without passing the limit.
int64_t least_largest_stage(const std::vector<int64_t>& cost, const std::vector<int64_t>& prefix, int stages) {
    const auto stages_needed = [&](int64_t limit) {
        int count = 0;
        int64_t sum = 0;
        for (const int64_t c : cost) {
            if (c > limit) return std::numeric_limits<int>::max();
            if (count == 0 || sum + c > limit) ++count, sum = 0;
            sum += c;
        }
        return count;
    };
    int64_t lo = *std::max_element(cost.begin(), cost.end()), hi = prefix.back();
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (stages_needed(mid) <= stages) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

}  // namespace

std::vector<int64_t> balanced_split(const std::vector<int64_t>& layer_cost, int stages,
                                    const std::vector<int64_t>& params) {
    const std::vector<int64_t>& free_of = params.size() == layer_cost.size() ? params : layer_cost;
    const int n = static_cast<int>(layer_cost.size());
    PARALAB_CHECK(stages >= 1 && stages <= n, "balanced_split: " + std::to_string(stages) +
                                                  " stages for " + std::to_string(n) + " layers");
    PARALAB_CHECK(std::all_of(layer_cost.begin(), layer_cost.end(), [](int64_t c) { return c >= 0; }),
                  "balanced_split: a layer's cost is negative");
    if (stages == 1) return {};
    std::vector<int64_t> prefix(static_cast<size_t>(n) + 1, 0);
    for (int i = 0; i < n; ++i) prefix[size_t(i) + 1] = prefix[size_t(i)] + layer_cost[size_t(i)];
    const auto is_free = [&](int j) { return free_of[size_t(j)] == 0 ? 1 : 0; };

    // Pass 1: the least possible largest stage.
    const int64_t limit = least_largest_stage(layer_cost, prefix, stages);
    const StageReach r = stage_reach(prefix, limit);
    const int K = stages;

    // Boundary t (1 ≤ t < K, the first layer of stage t) can be at p when layers [0, p) fit in
    // t stages and [p, n) in K − t under the limit: an interval [first[t], last[t]] of p, since
    // prefix_min grows with p and suffix_min shrinks.
    std::vector<int> first(size_t(K), 0), last(size_t(K), -1);
    for (int t = 1; t < K; ++t) {
        // The smallest p with suffix_min[p] <= K - t, the largest with prefix_min[p] <= t.
        const auto lo = std::partition_point(r.suffix_min.begin(), r.suffix_min.end(),
                                             [&](int v) { return v > K - t; });
        const auto hi = std::partition_point(r.prefix_min.begin(), r.prefix_min.end(),
                                             [&](int v) { return v <= t; });
        first[size_t(t)] = std::max(t, static_cast<int>(lo - r.suffix_min.begin()));
        last[size_t(t)] = std::min(n - K + t, static_cast<int>(hi - r.prefix_min.begin()) - 1);
        PARALAB_CHECK(first[size_t(t)] <= last[size_t(t)], "balanced_split: no split found");
    }

    // Pass 2: under that limit, the fewest stages that start with a parameter-free layer.
    // free_starts[t][p - first[t]]: the fewest among boundaries t..K-1 with boundary t at p (p's
    // own counted). Boundary t + 1 lies in (p, reach[p]], a window that moves forward with p:
    // its minimum is kept in a monotone deque, so each boundary's interval is walked once.
    std::vector<std::vector<int>> free_starts(static_cast<size_t>(K));
    for (int t = K - 1; t >= 1; --t) {
        std::vector<int>& here = free_starts[size_t(t)];
        here.resize(size_t(last[size_t(t)] - first[size_t(t)] + 1));
        if (t == K - 1) {
            for (int p = first[size_t(t)]; p <= last[size_t(t)]; ++p) here[size_t(p - first[size_t(t)])] = is_free(p);
            continue;
        }
        const std::vector<int>& next = free_starts[size_t(t) + 1];
        const int next_first = first[size_t(t) + 1], next_last = last[size_t(t) + 1];
        std::vector<int> window;  // positions q, their values increasing
        size_t front = 0;
        int pushed = next_first;  // the next q to enter the window
        for (int p = first[size_t(t)]; p <= last[size_t(t)]; ++p) {
            const int right = std::min(r.reach[size_t(p)], next_last);
            for (; pushed <= right; ++pushed) {
                const int v = next[size_t(pushed - next_first)];
                while (window.size() > front && next[size_t(window.back() - next_first)] >= v) window.pop_back();
                window.push_back(pushed);
            }
            while (front < window.size() && window[front] <= p) ++front;
            PARALAB_CHECK(front < window.size(), "balanced_split: no split found");
            here[size_t(p - first[size_t(t)])] = is_free(p) + next[size_t(window[front] - next_first)];
        }
    }

    // Walk from the front taking the latest boundary that keeps the optimum.
    int target = std::numeric_limits<int>::max();
    for (int p = first[1]; p <= std::min(last[1], r.reach[0]); ++p)
        target = std::min(target, free_starts[1][size_t(p - first[1])]);
    std::vector<int64_t> split;
    int i = 0;
    for (int t = 1; t < K; ++t) {
        int chosen = -1;
        for (int p = std::min(last[size_t(t)], r.reach[size_t(i)]); p > i && p >= first[size_t(t)]; --p)
            if (free_starts[size_t(t)][size_t(p - first[size_t(t)])] == target) {
                chosen = p;
                break;
            }
        PARALAB_CHECK(chosen > i, "balanced_split: no split found");
        split.push_back(chosen);
        target -= is_free(chosen);
        i = chosen;
    }
    return split;
}

void check_stage_count(int world, size_t layers, const std::string& strategy_name, int chunks) {
    const int64_t parts = int64_t{world} * chunks;
    if (chunks > 1 && static_cast<size_t>(parts) > layers) {
        std::string why = std::to_string(world) + " stages · " + std::to_string(chunks) + " chunks = " +
                          std::to_string(parts) + " model chunks for a model of " + std::to_string(layers) +
                          " top-level layers: each chunk holds at least one";
        throw ConfigError("strategy.interleave", why);
    }
    if (static_cast<size_t>(world) > layers)
        throw ConfigError("devices", strategy_name + " places at least one top-level layer on each device, but "
                          "there are " + std::to_string(world) + " devices for a model of " +
                          std::to_string(layers) + " layers");
}

void check_split(const std::vector<int64_t>& split, int world, size_t layers, int chunks) {
    const int parts = world * chunks;
    if (split.size() != static_cast<size_t>(parts - 1)) {
        std::string why = "expected " + std::to_string(parts - 1) + " layer indices (the first layer of each ";
        why += chunks > 1 ? "chunk after the first, for " + std::to_string(world) + " devices · " +
                                std::to_string(chunks) + " chunks"
                          : "stage after the first, for " + std::to_string(world) + " devices";
        why += "), got " + std::to_string(split.size());
        throw ConfigError("strategy.split", why);
    }
    int64_t last = 0;
    for (size_t i = 0; i < split.size(); ++i) {
        const int64_t b = split[i];
        const std::string key = "strategy.split[" + std::to_string(i) + "]";
        if (b <= 0 || b >= static_cast<int64_t>(layers))
            throw ConfigError(key, "expected a layer index from 1 to " + std::to_string(layers - 1) +
                              " (the first layer of a stage after the first), got " + std::to_string(b));
        if (b <= last)
            throw ConfigError(key, "expected indices in increasing order, got " + std::to_string(b) +
                              " after " + std::to_string(last));
        last = b;
    }
}

void check_schedule(const std::string& schedule, int64_t interleave, int64_t micro_batches, int stages,
                    const std::string& stages_key) {
    const bool interleaved = schedule == "interleaved_1f1b";
    if (schedule == "zb_h1" && interleave != 1)
        throw ConfigError("strategy.schedule", "zb_h1 runs one model chunk per device, but interleave is " +
                                                   std::to_string(interleave) +
                                                   " (model chunks per device: interleaved_1f1b only); set it to 1");
    if (!interleaved && interleave != 1)
        throw ConfigError("strategy.interleave", "interleave " + std::to_string(interleave) +
                                                     " (model chunks per device) needs schedule interleaved_1f1b, "
                                                     "not " + schedule + "; set it to 1");
    if (!interleaved) return;
    if (interleave < 2)
        throw ConfigError("strategy.interleave", "interleaved_1f1b needs at least 2 model chunks per device, got " +
                                                     std::to_string(interleave));
    if (stages < 2)
        throw ConfigError(stages_key, "interleaved_1f1b needs at least 2 pipeline stages, got " +
                                          std::to_string(stages));
    if (micro_batches % stages != 0)
        throw ConfigError("strategy.micro_batches",
                          "interleaved_1f1b runs the micro-batches in groups of the " + std::to_string(stages) +
                              " pipeline stages: " + std::to_string(micro_batches) + " micro-batches is not a "
                              "multiple of " + std::to_string(stages));
}

void check_zero_bubble(const std::string& schedule, int64_t zero, int64_t dp, int64_t micro_batches) {
    if (schedule != "zb_h1" || dp < 2 || zero < 2 || (zero == 2 && micro_batches > 1)) return;
    throw ConfigError("strategy.schedule",
                      "zb_h1 defers each micro-batch's weight gradients (W) past its backward, but zero " +
                          std::to_string(zero) + " over dp " + std::to_string(dp) +
                          (zero == 2 ? " with 1 micro-batch" : std::string()) +
                          " reduces each layer's gradients to their owners as its backward ends; use zero 0 "
                          "or 1 (or zero 2 with micro_batches > 1) with zb_h1, or schedule 1f1b");
}

void check_stages(const config::Experiment& e) {
    const auto split = option<std::vector<int64_t>>(e.strategy, "split");
    const int world = static_cast<int>(e.devices.size());
    const bool pipelined = e.strategy.type == "pipeline";
    if (pipelined)
        check_schedule(option<std::string>(e.strategy, "schedule"), option<int64_t>(e.strategy, "interleave"),
                       option<int64_t>(e.strategy, "micro_batches"), world, "devices");
    const int chunks = pipelined ? chunks_of(e) : 1;
    // A repeated layer's copies are layers of their own here (nn::expand_repeats).
    const size_t layers = nn::expand_repeats(e.layers).size();
    check_stage_count(world, layers, e.strategy.type, chunks);
    if (!split.empty()) check_split(split, world, layers, chunks);
}


const char* schedule_name(Schedule s) {
    switch (s) {
        case Schedule::gpipe:
            return "gpipe";
        case Schedule::one_f_one_b:
            return "1f1b";
        case Schedule::interleaved_1f1b:
            return "interleaved_1f1b";
        case Schedule::zb_h1:
            return "zb_h1";
    }
    return "?";
}

Schedule schedule_from_name(const std::string& name, const std::string& key) {
    for (const auto s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b, Schedule::zb_h1})
        if (name == schedule_name(s)) return s;
    throw ConfigError(key, "expected one of gpipe, 1f1b, interleaved_1f1b, zb_h1, got \"" + name + "\"");
}

Schedule schedule_of(const config::Experiment& e) {
    return schedule_from_name(option<std::string>(e.strategy, "schedule"));
}

int chunks_of(const config::Experiment& e) {
    if (schedule_of(e) != Schedule::interleaved_1f1b) return 1;
    return static_cast<int>(std::clamp<int64_t>(option<int64_t>(e.strategy, "interleave"), 1, 1024));
}

std::string chunk_phase(const char* phase, int chunk, int chunks) {
    std::string out = phase;
    if (chunks > 1) out += " chunk " + std::to_string(chunk);
    return out;
}

StepPicture stage_picture(const config::Experiment& e, bool pipelined) {
    StepPicture p;
    p.layout = StepPicture::Layout::chain;
    for (size_t i = 0; i < e.devices.size(); ++i) p.subtitles.push_back("stage " + std::to_string(i + 1));
    p.top = "→ activations forward      ← their gradients back";
    if (!pipelined) {
        p.caption = "One batch at a time: while one stage works, the others wait.";
        return p;
    }
    const Schedule schedule = schedule_of(e);
    p.caption = "The batch is cut into " + std::to_string(option<int64_t>(e.strategy, "micro_batches")) +
                " micro-batches (";
    p.caption += schedule == Schedule::interleaved_1f1b ? "interleaved 1F1B, " + std::to_string(chunks_of(e)) +
                                                             " model chunks per stage, the activations going "
                                                             "around the stages once per chunk"
                 : schedule == Schedule::one_f_one_b ? "1F1B"
                 : schedule == Schedule::zb_h1       ? "zero-bubble ZB-H1, each backward split into the input "
                                                       "gradient (B) and the weight gradient (W), which fills the "
                                                       "cooldown's idle time"
                                                     : "GPipe";
    p.caption += "): stages work on different micro-batches at once; the idle start and end are the bubble.";
    return p;
}


}  // namespace paralab::strategy::stages
