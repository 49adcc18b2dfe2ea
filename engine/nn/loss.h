// Losses (not layers): a loss takes the model's output and the targets, returns a scalar, and
// gives d loss / d output for its last forward.
//
// Every loss is the sum of per-sample losses divided by a denominator, the local batch by
// default. A data-parallel replica passes the GLOBAL batch instead, so that the replicas'
// gradients sum to the single-device gradient of the whole batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace paralab::nn {

class Loss {
public:
    virtual ~Loss();
    Loss(const Loss&) = delete;
    Loss& operator=(const Loss&) = delete;

    // pred: [B, ...]; target as the loss requires. Returns (sum of per-sample losses) /
    // denominator, with denominator = B when 0; accumulated in double. Throws ShapeError
    // naming both shapes when pred and target do not fit.
    double forward(const Tensor& pred, const Tensor& target, int64_t denominator = 0);
    // d loss / d pred for the last forward: a new activation tensor shaped like pred.
    Tensor backward();
    // Drops what the last forward kept for backward (an evaluation's loss, once read).
    void release();

    // "cross_entropy", "mse": the experiment file's name.
    const std::string& name() const { return m_name; }

    // A GPU step graph (engine/strategy/step_graph.h) splits forward in three. stage_target: the
    // target, checked against a prediction shaped `pred_shape`, copied into `staged` on `device`
    // in the form the loss reads (cross-entropy: the class ids as integers; MSE: the target in
    // `pred_dtype`), made on the first call and written in place after (a graph reads it
    // there). queue_forward: the loss of pred against a staged target, queued on pred's GPU with
    // no wait (recordable); backward() follows it as it follows forward. queued_loss: that
    // loss, once the queue has run it (waits).
    void stage_target(const Tensor& target, const Shape& pred_shape, DType pred_dtype, Device& device,
                      Tensor& staged);
    void queue_forward(const Tensor& pred, const Tensor& staged, int64_t denominator);
    double queued_loss() const;

protected:
    explicit Loss(std::string name) : m_name(std::move(name)) {}

    // pred and target are defined f32/f64 tensors with a batch dim; denominator > 0.
    virtual double forward_impl(const Tensor& pred, const Tensor& target, int64_t denominator) = 0;
    virtual Tensor backward_impl() = 0;
    virtual void release_impl() = 0;
    virtual void stage_impl(const Tensor& target, const Shape& pred_shape, DType pred_dtype, Device& device,
                            Tensor& staged) = 0;
    // The sum the loss divides, at a device double, and what it divides it by.
    struct QueuedSum {
        const double* sum = nullptr;
        double divisor = 1;
    };
    virtual QueuedSum queue_impl(const Tensor& pred, const Tensor& staged, int64_t denominator) = 0;

    // Throws ShapeError "<name>: prediction <shape> and target <shape> do not fit: <expected>".
    [[noreturn]] void shape_mismatch(const Tensor& pred, const Tensor& target,
                                     const std::string& expected) const;

private:
    std::string m_name;
    bool m_has_forward = false;
    QueuedSum m_queued;  // queue_forward's
    void* m_queued_queue = nullptr;
};

// Softmax cross-entropy over logits: pred [B, C], target [B] of class ids (integral values in
// the float dtype), or per position pred [B, T, C], target [B, T] (a language model's next
// tokens), where a sample's loss is the mean over its T positions. Fused and max-subtracted, so
// any finite logits give a finite loss. Backward is (softmax - onehot) / (denominator [* T]).
class CrossEntropyLoss : public Loss {
public:
    CrossEntropyLoss() : Loss("cross_entropy") {}

protected:
    double forward_impl(const Tensor& pred, const Tensor& target, int64_t denominator) override;
    Tensor backward_impl() override;
    void release_impl() override {
        m_probs = Tensor();
        m_ids.clear();
    }
    void stage_impl(const Tensor& target, const Shape& pred_shape, DType pred_dtype, Device& device,
                    Tensor& staged) override;
    QueuedSum queue_impl(const Tensor& pred, const Tensor& staged, int64_t denominator) override;

private:
    Tensor m_queued_sums;        // queue_impl's device sums (a recorded graph writes them in place)
    Tensor m_probs;              // [B, C] softmax of the last forward
    std::vector<int64_t> m_ids;  // [B]
    Tensor m_ids_on_gpu;         // [B] int64 (in f64-sized storage), when the logits are on a GPU
    int64_t m_denominator = 1;
};

// Squared error: target shaped like pred; a sample's loss is the mean over its elements of
// (pred - target)^2, so denominator B gives torch.nn.MSELoss(reduction='mean').
class MseLoss : public Loss {
public:
    MseLoss() : Loss("mse") {}

protected:
    double forward_impl(const Tensor& pred, const Tensor& target, int64_t denominator) override;
    Tensor backward_impl() override;
    void release_impl() override { m_pred = m_target = Tensor(); }
    void stage_impl(const Tensor& target, const Shape& pred_shape, DType pred_dtype, Device& device,
                    Tensor& staged) override;
    QueuedSum queue_impl(const Tensor& pred, const Tensor& staged, int64_t denominator) override;

private:
    Tensor m_queued_sums;
    Tensor m_pred, m_target;  // the last forward's operands (target in pred's dtype)
    int64_t m_denominator = 1;
};

// "cross_entropy" or "mse"; throws ConfigError "unknown loss 'x': expected cross_entropy or mse".
std::unique_ptr<Loss> make_loss(const std::string& name);

// logits: [B, C], target: [B] class ids (or [B, T, C] and [B, T]) -> the number of rows (or
// positions) whose argmax is the target.
int64_t count_correct(const Tensor& logits, const Tensor& target);

}  // namespace paralab::nn
