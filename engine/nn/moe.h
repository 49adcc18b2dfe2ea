// A mixture of experts in place of a transformer block's MLP (`mlp: "moe"`,
// docs/experiment-format.md, "Today's models"): [..., D] -> [..., D]. Every token (a row of D) is
// scored by a router (a linear D -> E without bias, softmax), sent to its top_k experts (each a
// SwiGLU MLP of width expert_ffn, nn/swiglu.h), and their outputs are summed weighted by the k
// chosen probabilities renormalised to sum 1; shared experts (SwiGLU MLPs of the same width) run
// on every token and are added. Each expert runs its GEMMs on the rows of its own tokens,
// gathered (no per-token products).
//
// capacity_factor c > 0: an expert takes at most ceil(c * N * k / E) of a forward's N tokens,
// in token order; the assignments past it are dropped (the token keeps the residual only) and
// counted. c = 0: dropless.
//
// The layer adds auxiliary losses to the model's loss itself, in backward: the load-balancing
// loss aux_loss * E * sum_e f_e P_e (Switch Transformer's, in Megatron-LM's top-k form: f_e the
// fraction of the N k assignments routed to e before dropping, P_e the mean router probability
// of e) and router_z_loss * mean_t logsumexp(logits_t)^2 (ST-MoE). Both are computed over the
// tokens of one forward (a micro-batch on one replica) and weighted like the model's loss
// (set_loss_weight).
//
// Expert parallelism (set_expert_shard): an expert group of ep devices, each with its own tokens,
// holds the experts in contiguous blocks of E / ep; the router and the shared experts are whole
// on every device. Forward routes the device's tokens, exchanges every device's per-expert counts
// (and the sums the auxiliary losses need) with an all-to-all, sends each token row to the device
// of each expert it keeps (dispatch), runs the held experts on the rows they received, in the
// group's token order (device by device, each in token order), and sends the outputs back
// (combine), which are summed weighted as above. Backward sends the weighted output gradients to
// the experts and their input gradients back in the same layouts. The group's forward is one
// forward of all its tokens: capacity ceil(c * N * k / E) counts the group's N, so the same
// assignments drop as on one device given the devices' tokens one after another, and the
// auxiliary losses are the group's (each device adds its rows' share of them, so that the
// shares sum to the group's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/config/records.h"
#include "engine/nn/linear.h"
#include "engine/nn/swiglu.h"

namespace paralab::nn {

struct MoEOptions {
    int64_t experts = 0;          // E
    int64_t top_k = 2;            // k <= E
    int64_t expert_ffn = 0;       // each expert's SwiGLU hidden width
    int64_t shared_experts = 0;   // SwiGLU MLPs of width expert_ffn on every token
    double capacity_factor = 0;   // 0: dropless
    double aux_loss = 0.01;       // load-balancing coefficient
    double router_z_loss = 0;     // z-loss coefficient
};

// What one layer routed in training forwards: config::MoERecord (`layer` its label). Under
// expert parallelism each device counts its own tokens' assignments (tokens_per_expert for every
// expert of the layer, wherever it is held), its dropped ones and its share of the auxiliary
// losses: summed over the group, the single device's.
using MoEStats = config::MoERecord;

// A device's place in an expert-parallel group (MoE::set_expert_shard): member `rank` of `world`,
// holding experts [rank E / world, (rank + 1) E / world). all_to_all is the group's
// Communicator::all_to_all: send_counts[q] elements of `send` go to member q and recv_counts[q]
// elements of `recv` come from member q, both laid out in member order (host buffers of dtype f32
// or f64); every member calls it in the same order.
struct ExpertShard {
    int rank = 0;
    int world = 1;
    std::function<void(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                       const std::vector<int64_t>& recv_counts, DType dtype)>
        all_to_all{};

    bool on() const { return world > 1; }
};

class MoE : public Layer {
public:
    // Throws ConfigError at the option's key: experts, top_k, expert_ffn below 1, top_k above
    // experts, shared_experts or a coefficient negative, capacity_factor negative.
    explicit MoE(const MoEOptions& options);
    // The routing and token movement are CPU loops (kernels/cpu/moe.h).
    bool runs_on_gpu() const override { return false; }
    // router, the experts held (0..E-1 on one device), shared experts: the order of the
    // parameters.
    std::vector<Layer*> children() override;
    // The weights file's name of each child, in children()'s order: "router", "experts.<e>" (e
    // the expert's index in the whole layer), "shared.<s>".
    std::vector<std::string> child_names() const;
    const MoEOptions& options() const { return m_options; }

    // The most assignments an expert takes of `tokens` (INT64_MAX when dropless).
    int64_t capacity(int64_t tokens) const;

    // Before build only: Megatron's split of every expert and shared expert over `world` devices
    // (SwiGLU::set_shard; expert_ffn must divide by world); the router stays whole on every
    // device, which computes the same routing.
    void set_shard(int rank, int world, std::function<void(const Tensor&)> all_reduce);

    // Before build only: expert parallelism (ExpertShard): this device keeps only its block of
    // E / world experts (the others are never built), and its parameters are those of the router,
    // that block and the shared experts. Throws ConfigError at "<path>.experts" when world does
    // not divide E, Error for a rank outside 0..world-1 or a group without all_to_all.
    void set_expert_shard(ExpertShard shard);
    const ExpertShard& expert_shard() const { return m_expert; }
    // The index in the whole layer of the first expert held, and how many are held.
    int64_t first_expert() const { return m_first; }
    int64_t experts_held() const { return static_cast<int64_t>(m_experts.size()); }
    // Under expert parallelism, the numbers per sample of one all-to-all's send and receive
    // buffers on balanced routing (k rows of D per token each way), held while it runs; 0 on one
    // device.
    int64_t exchange_per_sample() const;

    // How the auxiliary losses enter the model's loss: each forward's are multiplied by
    // per_row * (its batch's rows) — the model's loss divides by the global batch, so a
    // micro-batch's auxiliary losses weigh as its share of it — and their gradients in backward
    // also by grad_scale (the loss gradient's factor: fp16's loss scale). Until set: per_row =
    // 1 / rows of each forward (the mean over its batch), grad_scale 1.
    void set_loss_weight(double per_row) { m_per_row = per_row; }
    void set_grad_scale(double grad_scale) { m_grad_scale = grad_scale; }
    // The auxiliary losses the last forward added (weighted), what finite differences of the
    // model's loss see.
    double added_loss() const { return m_added_loss; }

protected:
    Shape build_impl(const Shape& input) override;
    void reset_parameters_impl(Rng& rng) override;
    Tensor forward_impl(const Tensor& x, Mode mode) override;
    Tensor backward_impl(const Tensor& dy) override;
    // The router, the k experts a token uses, the shared experts; the routing and the
    // weighted sum (active experts only: a token's unused experts cost it nothing). Under
    // expert parallelism, per token of this device on balanced routing: its held experts compute
    // k rows per token of the device, as on one device.
    int64_t flops_impl() const override;
    // The router's input and probabilities, each used expert's input rows, hidden and output
    // rows (k per token), the shared experts'; per token of this device under expert
    // parallelism on balanced routing, as flops_impl.
    int64_t activations_impl() override;
    void set_needs_input_grad_impl(bool needs) override;
    void release_saved_impl() override;

private:
    // The group's routing of one forward (on one device, this device's).
    struct GroupRouting {
        int64_t tokens = 0;                // N over the group
        std::vector<int64_t> routed;       // [E]: assignments to each expert, before capacity
        std::vector<double> prob_sum;      // [E]: router probabilities summed over the tokens
        double lse_squares = 0;            // sum over the tokens of logsumexp(logits_t)^2
        std::vector<int64_t> kept;         // [world * E]: each member's assignments kept per expert
    };
    GroupRouting group_routing(int64_t N, const std::vector<int64_t>& routed, const std::vector<double>& prob_sum,
                               double lse_squares) const;
    // The element counts of a dispatch (a combine swaps them): to member q this device's rows
    // of q's experts, from member q its rows of this device's experts. Returns the rows sent and
    // received in all.
    std::pair<int64_t, int64_t> dispatch_counts(std::vector<int64_t>& send, std::vector<int64_t>& recv) const;
    // Held expert e's rows from each member in the received layout (its first row, its count),
    // in member order: the rows of e's input.
    std::vector<std::pair<int64_t, int64_t>> held_rows(int64_t e, const std::vector<int64_t>& recv_counts) const;
    // Dispatch, the held experts' forward and combine: each expert's output rows for this
    // device's tokens in m_routed[e].out.
    void expert_parallel_forward(const Tensor& xf, Mode mode);
    // The weighted output gradients to the held experts, their backward, and (dx defined) their
    // input gradients back, added into dx by expert.
    void expert_parallel_backward(const Tensor& dy, const Tensor& dweight, const Tensor& dx);
    Tensor new_exchange(int64_t rows) const;

    MoEOptions m_options;
    ExpertShard m_expert;
    int64_t m_first = 0;  // the first expert held
    int64_t m_D = 0, m_rows = 0;  // width, token rows per sample
    std::unique_ptr<Linear> m_router;
    std::vector<std::unique_ptr<SwiGLU>> m_experts, m_shared;
    double m_per_row = 0, m_grad_scale = 1;  // set_loss_weight's; per_row 0: unset
    double m_added_loss = 0;
    bool m_counts = true;  // false on tensor shards other than the first (their group routes the same tokens)
    // From the last forward, for backward: the router's output (N tokens), each expert's tokens.
    Tensor m_probs, m_lse, m_weight;  // [N, E], [N], [N, k]
    std::vector<int64_t> m_choice;    // [N, k]
    std::vector<double> m_fraction;   // [E]: f_e over the group
    double m_loss_weight = 0;         // the weight of the group's auxiliary losses in the loss
    int64_t m_group_tokens = 0;       // the group's N
    std::vector<int64_t> m_kept;      // [world * E]: each member's kept assignments per expert
    struct Routed {
        std::vector<int64_t> rows;  // this device's tokens it computes, in token order
        std::vector<int64_t> assignment;  // their index t * k + j in m_choice
        Tensor weight;              // [n]: their renormalised weights
        Tensor out;                 // [n, D]: the expert's output rows
    };
    std::vector<Routed> m_routed;   // per expert of the whole layer
};

// For every mixture of experts in `root`'s tree (itself included): MoE::set_loss_weight,
// MoE::set_grad_scale, and (before build) MoE::set_expert_shard.
void set_moe_loss_weight(Layer& root, double per_row);
void set_moe_grad_scale(Layer& root, double grad_scale);
void set_moe_expert_shard(Layer& root, const ExpertShard& shard);

// What this thread's mixtures of experts routed in training forwards (not recomputations)
// since the last call, one entry per layer in the order they first ran, then cleared. A rank's
// forwards run on its own thread, which takes them after each step (run/training.cpp); a tensor
// shard other than the first of its group adds nothing (the group routes the same tokens).
std::vector<MoEStats> take_moe_step_stats();

}  // namespace paralab::nn
