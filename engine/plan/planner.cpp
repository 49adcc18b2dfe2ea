#include "engine/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include <nlohmann/json.hpp>

#include "engine/comm/device_mesh.h"
#include "engine/plan/goodput.h"
#include "engine/plan/layer_cost.h"
#include "engine/plan/pipeline_sim.h"
#include "engine/run/experiment_file.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/stages.h"
#include "engine/util/error.h"

namespace paralab::plan {

using nlohmann::json;
namespace stages = strategy::stages;

// ---- checks ---------------------------------------------------------------------------------

std::string check_mesh(const Mesh& mesh, const PlanModel& model, int64_t batch, int devices) {
    const auto s = [](int64_t v) { return std::to_string(v); };
    if (mesh.devices() != devices)
        return "dp·tp·pp = " + s(mesh.dp) + "·" + s(mesh.tp) + "·" + s(mesh.pp) + " = " +
               s(mesh.devices()) + " devices, but the cluster has " + s(devices) +
               " (nodes × gpus-per-node)";
    if (mesh.tp > 1) {
        if (model.blocks == 0)
            return "tp = " + s(mesh.tp) +
                   " splits attention and transformer_block layers, and the model has none";
        for (const auto& l : model.layers) {
            if (!l.transformer()) continue;
            if (l.heads % mesh.tp != 0)
                return "heads (" + s(l.heads) + ") not divisible by tp (" + s(mesh.tp) + ")";
            if (l.kv_heads % mesh.tp != 0)
                return "kv_heads (" + s(l.kv_heads) + ") not divisible by tp (" + s(mesh.tp) + ")";
            if (l.ffn % mesh.tp != 0)
                return "ffn (" + s(l.ffn) + ") not divisible by tp (" + s(mesh.tp) + ")";
        }
    }
    // The simulation holds every (chunk, micro-batch) pair of the step: bounded so that a plan
    // stays well under a second and a few hundred MB (docs/planner.md, "Bounds").
    const int64_t pairs = static_cast<int64_t>(mesh.pp) * mesh.chunks() * mesh.micro_batches;
    if (pairs > kMaxPipelinePairs)
        return "pp × interleave × micro_batches = " + s(mesh.pp) + " × " + s(mesh.chunks()) + " × " +
               s(mesh.micro_batches) + " = " + s(pairs) + " pipeline steps to simulate; a plan takes at most " +
               s(kMaxPipelinePairs);
    // The schedule's rules are the engine's (pipeline's and hybrid's check).
    try {
        stages::check_schedule(stages::schedule_name(mesh.schedule), mesh.interleave, mesh.micro_batches, mesh.pp,
                               "strategy.pp");
        stages::check_zero_bubble(stages::schedule_name(mesh.schedule), mesh.zero, mesh.dp, mesh.micro_batches);
    } catch (const ConfigError& e) {
        return e.reason();
    }
    const int64_t chunks = static_cast<int64_t>(mesh.pp) * mesh.chunks();
    if (model.blocks > 0 && chunks > model.blocks)
        return "more pipeline stages (" + s(chunks) + ") than transformer blocks (" +
               s(model.blocks) + ")";
    if (chunks > static_cast<int64_t>(model.layers.size()))
        return "more pipeline stages (" + s(chunks) + ") than layers (" +
               s(static_cast<int64_t>(model.layers.size())) + ")";
    if (batch < static_cast<int64_t>(mesh.dp) * mesh.micro_batches)
        return "the global batch (" + s(batch) + ") is smaller than dp × micro_batches (" +
               s(static_cast<int64_t>(mesh.dp) * mesh.micro_batches) + ")";
    return "";
}

namespace {

struct ChunkCost {
    double compute_f = 0, compute_b = 0, recompute = 0, tp_f = 0, tp_b = 0;
    double stored_bytes = 0, largest_full = 0, parameters = 0, largest_gather = 0;
    int64_t boundary = 0;  // numbers per sample sent to the next chunk
    double forward_s() const { return compute_f + tp_f; }
    double backward_s() const { return compute_b + recompute + tp_b; }
};

}  // namespace

// ---- one prediction --------------------------------------------------------------------------

namespace {

// A stack whose devices follow ParaLab's own memory model: the most loaded device's bytes are
// the Strategy tab's (strategy::estimate_memory of the mesh as hybrid's options, asked of the
// layers on the meta device), its workspace the cluster's reserved bytes.
void engine_memory(const config::Experiment& file, const Mesh& mesh, const Cluster& cluster, Prediction& p) {
    config::Experiment e = file;
    e.strategy = hybrid_options(mesh);
    e.train.recompute = nn::recompute_name(mesh.recompute);
    e.train.precision = precision_name(mesh.precision);
    e.devices.assign(static_cast<size_t>(mesh.devices()), "cpu:0");
    const strategy::ModelCost cost = strategy::model_cost(e, run::model_input_shape(e));
    const std::vector<strategy::DeviceMemoryEstimate> devices = strategy::estimate_memory(e, cost);
    const comm::DeviceMesh grid(comm::MeshShape{.dp = mesh.dp, .tp = mesh.tp, .pp = mesh.pp});
    int64_t most = -1;
    for (size_t k = 0; k < devices.size(); ++k) {
        if (devices[k].total() <= most) continue;
        most = devices[k].total();
        for (size_t c = 0; c < kMemCategoryCount; ++c) p.memory[c] = static_cast<double>(devices[k].bytes[c]);
        p.memory_stage = grid.coord(static_cast<int>(k), comm::Axis::pp);
    }
    p.memory[static_cast<size_t>(MemCategory::workspace)] += cluster.reserved_bytes;
    p.memory_total = 0;
    for (double b : p.memory) p.memory_total += b;
}

}  // namespace


double parameter_bytes(const Mesh& mesh) { return mesh.precision == MatmulPrecision::fp32 ? 4 : 2; }

double optimizer_state_bytes(const Mesh& mesh, int state_numbers) {
    return 4.0 * state_numbers + (mesh.precision != MatmulPrecision::fp32 ? 4.0 : 0.0);
}

Prediction predict(const config::Experiment& e, const PlanModel& model, const Cluster& cluster,
                   const Mesh& mesh, std::vector<PipeSpan>* timeline) {
    Prediction p;
    p.mesh = mesh;
    p.stack = cluster.stack.name;
    if (static_cast<int64_t>(cluster.nodes) * cluster.gpus_per_node > kMaxClusterDevices) {
        p.skipped = "nodes × gpus_per_node above " + std::to_string(kMaxClusterDevices) + " devices";
        return p;
    }
    p.devices = cluster.devices();
    const int64_t batch = e.data.batch_size;
    p.skipped = check_mesh(mesh, model, batch, p.devices);
    if (!p.skipped.empty()) return p;

    LayerContext x{cluster, mesh};
    x.peak = cluster.peak_flops(mesh.precision);
    x.act_bytes = mesh.precision == MatmulPrecision::fp32 ? 4 : 2;
    const int64_t replicas_rows = static_cast<int64_t>(mesh.dp) * mesh.micro_batches;
    x.b = (batch + replicas_rows - 1) / replicas_rows;
    p.micro_batch = x.b;
    const int v = mesh.chunks(), P = mesh.pp, m = mesh.micro_batches, G = P * v;

    // Chunks: the engine's balanced split of the top-level layers by forward FLOPs.
    std::vector<int64_t> layer_params, layer_flops;
    for (const auto& l : model.layers) {
        layer_params.push_back(l.parameters);
        layer_flops.push_back(l.flops);
    }
    std::vector<int64_t> bounds{0};
    if (G > 1)
        for (int64_t s : stages::balanced_split(layer_flops, G, layer_params)) bounds.push_back(s);
    bounds.push_back(static_cast<int64_t>(model.layers.size()));

    std::vector<ChunkCost> chunks(static_cast<size_t>(G));
    int64_t prev_out =
        model.input_numel;  // each layer's input per sample: the previous one's output
    for (int g = 0; g < G; ++g) {
        ChunkCost& c = chunks[static_cast<size_t>(g)];
        for (int64_t i = bounds[static_cast<size_t>(g)]; i < bounds[static_cast<size_t>(g) + 1];
             ++i) {
            const PlanLayer& l = model.layers[static_cast<size_t>(i)];
            const LayerCost lc =
                l.transformer() ? transformer_cost(l, prev_out, x) : other_cost(l, prev_out, x);
            c.compute_f += lc.forward_s;
            c.compute_b += 2 * lc.forward_s;
            if (mesh.recompute == nn::Recompute::full)
                c.recompute += lc.forward_s + lc.tp_recompute_s;
            else if (mesh.recompute == nn::Recompute::selective)
                c.recompute += lc.selective_s;
            c.tp_f += lc.tp_forward_s;
            c.tp_b += lc.tp_backward_s;
            c.stored_bytes += lc.stored_bytes;
            c.largest_full = std::max(c.largest_full, lc.full_bytes);
            c.parameters += lc.parameters;
            c.largest_gather = std::max(c.largest_gather, lc.gather_parameters);
            prev_out = l.output;
        }
        c.boundary = prev_out;
    }
    // The loss keeps the logits in fp32 on the last chunk (split by vocabulary with tp).
    const bool last_split =
        mesh.tp > 1 && !model.layers.empty() && model.layers.back().type == "linear";
    chunks.back().stored_bytes += static_cast<double>(model.layers.back().output) *
                                  static_cast<double>(x.b) * 4 / (last_split ? mesh.tp : 1);

    // The pipeline: with the transfers between stages, and without (the bubble alone).
    PipeTimes times, still;
    for (const auto& c : chunks) {
        times.forward.push_back(c.forward_s());
        times.backward.push_back(c.backward_s());
        // zb_h1's W: the weight gradients' GEMMs, half of the backward's; the recomputation and
        // the tensor group's collectives stay in B.
        times.weight.push_back(c.compute_b / 2);
    }
    const Link nvlink{cluster.intra_latency, cluster.intra_bandwidth};
    for (int g = 0; g + 1 < G; ++g) {
        const int from = g % P, to = (g + 1) % P;
        const Link l = link_of(cluster, std::abs(to - from) + 1, mesh.tp * mesh.dp);
        const double bytes = static_cast<double>(chunks[static_cast<size_t>(g)].boundary) *
                             static_cast<double>(x.b) * x.act_bytes;
        // Megatron-LM's scatter/gather: each tensor rank sends 1/tp of the activation over its
        // own adapter, and the receivers all-gather it over NVLink.
        times.transfer.push_back(mesh.tp > 1 ? send_s(bytes / mesh.tp, l) +
                                                   all_gather_s(bytes, mesh.tp, nvlink)
                                             : send_s(bytes, l));
    }
    times.blocking_sends = true;
    still = times;
    std::fill(still.transfer.begin(), still.transfer.end(), 0.0);
    PipeResult run = simulate_pipeline(mesh.schedule, P, v, m, times, timeline != nullptr);
    if (timeline) *timeline = std::move(run.spans);
    const PipeResult bubble_only = simulate_pipeline(mesh.schedule, P, v, m, still);

    // Per stage device: its chunks' sums; the critical device is the busiest.
    const auto device_chunks = [&](int d) {
        std::vector<int> out;
        for (int c = 0; c < v; ++c) out.push_back(c * P + d);
        return out;
    };
    int critical = 0;
    for (int d = 1; d < P; ++d)
        if (run.busy[static_cast<size_t>(d)] > run.busy[static_cast<size_t>(critical)])
            critical = d;

    const int k = strategy::optimizer_state_per_parameter(e.optimizer);
    const bool mixed = mesh.precision != MatmulPrecision::fp32;
    const double dp = mesh.dp;
    const Link dp_link = link_of(cluster, mesh.dp, mesh.tp);

    double worst_total = -1;
    for (int d = 0; d < P; ++d) {
        double params = 0, gather = 0, largest_full = 0, bwd_one = 0, compute_all = 0;
        for (int g : device_chunks(d)) {
            const ChunkCost& c = chunks[static_cast<size_t>(g)];
            params += c.parameters;
            gather = std::max(gather, c.largest_gather);
            largest_full = std::max(largest_full, c.largest_full);
            bwd_one += c.backward_s();
            compute_all += m * (c.forward_s() + c.backward_s());
        }
        // Activations in flight: the schedule's order, each chunk's bytes while its micro-batch
        // waits for its backward (zb_h1: for its W, an upper bound: W keeps only the linear
        // layers' inputs and output gradients).
        double live = 0, peak_live = 0;
        const stages::Pass frees =
            stages::splits_backward(mesh.schedule) ? stages::Pass::weight : stages::Pass::backward;
        for (const stages::Op& op : stages::stage_schedule(mesh.schedule, d, P, m, v)) {
            const double bytes = chunks[static_cast<size_t>(op.chunk * P + d)].stored_bytes;
            if (op.pass == stages::Pass::forward) live += bytes;
            else if (op.pass == frees) live -= bytes;
            peak_live = std::max(peak_live, live);
        }
        if (mesh.recompute == nn::Recompute::full)
            peak_live += largest_full;  // one layer recomputed at a time

        // Data parallelism (the gradient all-reduce, ZeRO's collectives).
        // The gradients in the precision the stack all-reduces them in.
        const double grad_bytes = params * (cluster.stack.grad_reduce_fp32 ? 4.0 : x.act_bytes);
        double dp_s = 0, dp_buffers = 0;
        if (mesh.dp > 1) {
            const double bucket = std::min(grad_bytes, mesh.bucket_mb * 1e6);
            if (mesh.zero <= 2) {
                // Overlapped with the last micro-batch's backward (the gradients are final only
                // then), except the last bucket.
                const double reduce = mesh.zero == 0
                                          ? all_reduce_s(grad_bytes, mesh.dp, dp_link)
                                          : reduce_scatter_s(grad_bytes, mesh.dp, dp_link);
                const double last = mesh.zero == 0 ? all_reduce_s(bucket, mesh.dp, dp_link)
                                                   : reduce_scatter_s(bucket, mesh.dp, dp_link);
                dp_s = mesh.overlap_grad_reduce ? std::max(last, reduce - bwd_one) : reduce;
                if (mesh.zero >= 1)
                    dp_s += all_gather_s(params * x.act_bytes, mesh.dp, dp_link);  // the updated parameters
                dp_buffers = 2 * bucket;
            } else {
                // ZeRO-3: every micro-batch gathers the parameters before forward and before
                // backward and reduce-scatters the gradients, prefetched under the compute; the
                // first layer's gather is never hidden.
                const double ag = all_gather_s(params * x.act_bytes, mesh.dp, dp_link);
                const double rs = reduce_scatter_s(grad_bytes, mesh.dp, dp_link);
                const double first = all_gather_s(gather * x.act_bytes / mesh.tp, mesh.dp, dp_link);
                dp_s = std::max(2 * m * first, m * (2 * ag + rs) - compute_all);
                dp_buffers = 2 * gather * x.act_bytes;
            }
        }
        // Adam in mixed precision reads the 16-bit gradient and the fp32 master, m and v and
        // writes them and the 16-bit parameter: about 32 bytes a parameter (28 in fp32; SGD less).
        const double shard = params / (mesh.zero >= 1 ? dp : 1);
        const double update_bytes = (k == 2 ? 28.0 : k == 1 ? 20.0 : 12.0) + (mixed ? 4.0 : 0.0);
        const double optimizer_s = x.memory_s(shard * update_bytes);

        std::array<double, kMemCategoryCount> mem{};
        const auto at = [&mem](MemCategory c) -> double& { return mem[static_cast<size_t>(c)]; };
        at(MemCategory::parameters) = params * parameter_bytes(mesh) / (mesh.zero >= 3 ? dp : 1);
        at(MemCategory::gradients) = params * parameter_bytes(mesh) / (mesh.zero >= 2 ? dp : 1);
        at(MemCategory::optimizer_state) =
            params * optimizer_state_bytes(mesh, k) / (mesh.zero >= 1 ? dp : 1);
        at(MemCategory::activations) = peak_live;
        double pp_buffers = 0;
        if (P > 1)
            for (int g : device_chunks(d))
                pp_buffers += 2 * static_cast<double>(chunks[static_cast<size_t>(g)].boundary) *
                              static_cast<double>(x.b) * x.act_bytes;
        at(MemCategory::communication) = dp_buffers + pp_buffers;
        at(MemCategory::workspace) = cluster.reserved_bytes;
        double total = 0;
        for (double v_ : mem) total += v_;
        if (total > worst_total) {
            worst_total = total;
            p.memory = mem;
            p.memory_total = total;
            p.memory_stage = d;
        }
        if (d == critical) {
            for (int g : device_chunks(d)) {
                const ChunkCost& c = chunks[static_cast<size_t>(g)];
                p.breakdown.compute += m * (c.compute_f + c.compute_b);
                p.breakdown.recompute += m * c.recompute;
                p.breakdown.tp_comm += m * (c.tp_f + c.tp_b);
            }
            p.breakdown.dp_comm = dp_s;
            p.breakdown.optimizer = optimizer_s;
        }
    }
    p.breakdown.pp_bubble =
        std::max(0.0, bubble_only.makespan - bubble_only.busy[static_cast<size_t>(critical)]);
    p.breakdown.pp_comm = std::max(0.0, run.makespan - bubble_only.makespan);
    // The critical device's own time is its busy time; the step ends with the slowest device's
    // pipeline flush, then its gradient collectives and the optimizer.
    p.step_time_s = run.makespan + p.breakdown.dp_comm + p.breakdown.optimizer;
    const double rows = static_cast<double>(x.b) * m * mesh.dp;  // rows actually processed
    p.samples_per_s = rows / p.step_time_s;
    p.tokens_per_s = p.samples_per_s * static_cast<double>(model.seq_len);
    p.model_flops_per_step = 3.0 * static_cast<double>(model.flops_per_sample) * rows;
    p.mfu = p.model_flops_per_step / (p.step_time_s * p.devices * x.peak);
    p.checkpoint_bytes = static_cast<double>(model.parameters) *
                         (parameter_bytes(mesh) + optimizer_state_bytes(mesh, k));
    if (cluster.stack.engine_memory) engine_memory(e, mesh, cluster, p);
    p.memory_capacity = cluster.memory_bytes;
    p.fits = p.memory_total <= cluster.memory_bytes;
    return p;
}

// ---- sweeps ----------------------------------------------------------------------------------

std::string fill_dp(Mesh& m, int devices, int64_t batch, int64_t rows, bool keep_rows) {
    const int64_t rest = int64_t{m.tp} * m.pp;
    if (devices % rest != 0)
        return "tp·pp = " + std::to_string(rest) + " does not divide the " + std::to_string(devices) +
               " devices";
    m.dp = static_cast<int>(devices / rest);
    // As Megatron-LM's global batch = dp × micro-batches × micro-batch size.
    if (keep_rows)
        m.micro_batches = static_cast<int>(std::clamp<int64_t>(
            batch / (int64_t{m.dp} * std::max<int64_t>(1, rows)), 1, int64_t{1} << 20));
    return "";
}

Rank rank_from_name(const std::string& name) {
    if (name == "tokens_per_s") return Rank::tokens_per_s;
    if (name == "mfu") return Rank::mfu;
    if (name == "time_to_train") return Rank::time_to_train;
    throw ConfigError("--rank", "expected one of tokens_per_s, mfu, time_to_train, got \"" + name + "\"");
}

std::vector<Prediction> sweep(
    const config::Experiment& e, const PlanModel& model, const Cluster& cluster, const Mesh& base,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& sweeps,
    const SweepOptions& options) {
    const auto swept = [&](const char* key) {
        return std::any_of(sweeps.begin(), sweeps.end(), [&](const auto& s) { return s.first == key; });
    };
    const bool derive_dp = !swept("dp") && (swept("tp") || swept("pp"));
    const bool keep_rows = derive_dp && !swept("micro_batches");
    const int64_t replicas = int64_t{base.dp} * base.micro_batches;
    const int64_t rows = (e.data.batch_size + replicas - 1) / replicas;
    if (options.rank == Rank::time_to_train && (!options.goodput || options.goodput->tokens <= 0))
        throw ConfigError("--rank", "time_to_train needs the goodput options and --tokens N");
    std::vector<Prediction> out;
    Mesh mesh = base;
    const std::function<void(size_t)> walk = [&](size_t i) {
        if (i == sweeps.size()) {
            Mesh m = mesh;
            const std::string why =
                derive_dp ? fill_dp(m, cluster.devices(), e.data.batch_size, rows, keep_rows) : "";
            if (!why.empty()) {
                Prediction p;
                p.mesh = m;
                p.devices = cluster.devices();
                p.skipped = why;
                out.push_back(std::move(p));
                return;
            }
            out.push_back(predict(e, model, cluster, m));
            return;
        }
        for (const auto& value : sweeps[i].second) {
            set_mesh_key(mesh, sweeps[i].first, value);
            walk(i + 1);
        }
    };
    walk(0);
    const auto group = [](const Prediction& p) { return !p.skipped.empty() ? 2 : p.fits ? 0 : 1; };
    // Higher is better: tokens/s, MFU, or the inverse of the time to train.
    const auto score = [&](const Prediction& p) {
        if (!p.skipped.empty()) return 0.0;
        switch (options.rank) {
            case Rank::mfu: return p.mfu;
            case Rank::time_to_train: {
                const double t = goodput_of(p, *options.goodput).time_to_train_s;
                return t > 0 ? 1 / t : 0.0;
            }
            case Rank::tokens_per_s: break;
        }
        return p.tokens_per_s;
    };
    std::vector<std::pair<double, size_t>> order;
    for (size_t i = 0; i < out.size(); ++i) order.emplace_back(score(out[i]), i);
    std::stable_sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
        const int ga = group(out[a.second]), gb = group(out[b.second]);
        if (ga != gb) return ga < gb;
        return a.first > b.first;
    });
    std::vector<Prediction> ranked;
    ranked.reserve(out.size());
    for (const auto& [s, i] : order) ranked.push_back(std::move(out[i]));
    out = std::move(ranked);
    return out;
}

// ---- JSON ------------------------------------------------------------------------------------

namespace {
json mesh_value(const Mesh& m, const std::string& key) {
    if (key == "dp") return m.dp;
    if (key == "tp") return m.tp;
    if (key == "pp") return m.pp;
    if (key == "zero") return m.zero;
    if (key == "micro_batches") return m.micro_batches;
    if (key == "interleave") return m.interleave;
    if (key == "schedule") return stages::schedule_name(m.schedule);
    if (key == "sequence_parallel") return m.sequence_parallel;
    if (key == "recompute") return nn::recompute_name(m.recompute);
    return nullptr;
}
}  // namespace

json to_json(const Prediction& p, const std::vector<std::string>& swept_keys) {
    json out = json::object();
    if (!swept_keys.empty()) {
        json config = json::object();
        for (const auto& k : swept_keys) config[k] = mesh_value(p.mesh, k);
        out["config"] = config;
    }
    json mesh = json::object();
    for (const auto& k : sweep_keys()) mesh[k] = mesh_value(p.mesh, k);
    mesh["precision"] = precision_name(p.mesh.precision);
    out["mesh"] = mesh;
    out["devices"] = p.devices;
    if (!p.skipped.empty()) {
        out["skipped"] = p.skipped;
        return out;
    }
    out["stack"] = p.stack;
    out["micro_batch_size"] = p.micro_batch;
    out["step_time_s"] = p.step_time_s;
    out["tokens_per_s"] = p.tokens_per_s;
    out["samples_per_s"] = p.samples_per_s;
    out["mfu"] = p.mfu;
    out["fits"] = p.fits;
    json memory = json::object();
    for (size_t i = 0; i < kMemCategoryCount; ++i)
        memory[std::string(mem_category_name(static_cast<MemCategory>(i)))] =
            static_cast<int64_t>(std::llround(p.memory[i]));
    memory["total"] = static_cast<int64_t>(std::llround(p.memory_total));
    out["memory_bytes"] = memory;
    out["memory_capacity_bytes"] = static_cast<int64_t>(std::llround(p.memory_capacity));
    out["memory_stage"] = p.memory_stage;
    const Breakdown& b = p.breakdown;
    out["breakdown_s"] = {{"compute", b.compute},    {"recompute", b.recompute},
                          {"tp_comm", b.tp_comm},    {"pp_bubble", b.pp_bubble},
                          {"pp_comm", b.pp_comm},    {"dp_comm", b.dp_comm},
                          {"optimizer", b.optimizer}};
    return out;
}

}  // namespace paralab::plan
