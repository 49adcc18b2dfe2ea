#include "engine/nn/loss.h"

#include <kernels/cpu/elementwise.h>
#include <kernels/cpu/softmax.h>
#include <kernels/gpu/elementwise.h>
#include <kernels/gpu/softmax.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/device/gpu_values.h"

namespace paralab::nn {

namespace kc = kernels::cpu;
namespace kg = kernels::gpu;

namespace {

[[noreturn]] void throw_mismatch(const std::string& who, const Shape& pred, const Shape& target,
                                 const std::string& expected) {
    throw ShapeError(who + ": prediction " + pred.to_string() + " and target " + target.to_string() +
                     " do not fit: " + expected);
}

// logits [B, C] with target [B], or per position logits [B, T, C] with target [B, T]; else
// ShapeError naming both. Returns the rows of the softmax (B, or B * T).
int64_t check_class_shapes(const std::string& who, const Shape& logits, const Shape& target) {
    const std::string expected =
        "expected logits [B, C] and target [B] of class ids, or [B, T, C] and [B, T] (one per position)";
    if ((logits.rank() != 2 && logits.rank() != 3) || logits.back() < 1)
        throw_mismatch(who, logits, target, expected);
    const Shape want = logits.rank() == 2 ? Shape{logits[0]} : Shape{logits[0], logits[1]};
    if (target != want) throw_mismatch(who, logits, target, expected);
    return target.numel();
}

// target: [B] integral values in the float dtype -> ids in [0, classes); Error naming the
// first bad one.
void read_class_ids(const std::string& who, const Tensor& target_anywhere, int64_t classes,
                    std::vector<int64_t>& ids) {
    const Tensor target = gpu::on_host(target_anywhere);
    ids.resize(static_cast<size_t>(target.numel()));
    dispatch_float(target.dtype(), [&]<class T>() {
        const T* t = target.data<T>();
        for (int64_t r = 0; r < target.numel(); ++r) {
            const T v = t[r];
            if (!(v >= T(0) && v < static_cast<T>(classes) && std::floor(v) == v)) {
                std::ostringstream msg;
                msg << who << ": target " << v << " at row " << r << " is not a class id in [0, "
                    << classes << ")";
                throw Error(msg.str());
            }
            ids[static_cast<size_t>(r)] = static_cast<int64_t>(v);
        }
    });
}

Tensor new_like(const Tensor& t) {
    return Tensor::empty(t.shape(), t.dtype(), t.device(), MemCategory::activations);
}

}  // namespace

// ---- Loss -----------------------------------------------------------------------------------

Loss::~Loss() = default;

double Loss::forward(const Tensor& pred, const Tensor& target, int64_t denominator) {
    if (!pred.defined() || !target.defined())
        throw Error(m_name + ": forward needs a defined prediction and target");
    if (pred.rank() == 0) throw_mismatch(m_name, pred.shape(), target.shape(), "the prediction has no batch dim");
    if (denominator < 0)
        throw Error(m_name + ": negative denominator " + std::to_string(denominator));
    if (denominator == 0) denominator = pred.dim(0);
    if (denominator == 0) throw Error(m_name + ": empty batch and no denominator");
    m_has_forward = false;
    const double loss = forward_impl(pred, target, denominator);
    m_has_forward = true;
    return loss;
}

void Loss::stage_target(const Tensor& target, const Shape& pred_shape, DType pred_dtype, Device& device,
                        Tensor& staged) {
    if (!target.defined()) throw Error(m_name + ": staging needs a defined target");
    if (pred_shape.rank() == 0) throw_mismatch(m_name, pred_shape, target.shape(), "the prediction has no batch dim");
    stage_impl(target, pred_shape, pred_dtype, device, staged);
}

void Loss::queue_forward(const Tensor& pred, const Tensor& staged, int64_t denominator) {
    if (!pred.defined() || !staged.defined() || !pred.queue())
        throw Error(m_name + ": a queued forward needs a prediction on a GPU and a staged target");
    if (denominator <= 0) throw Error(m_name + ": a queued forward needs a positive denominator");
    m_has_forward = false;
    m_queued = queue_impl(pred, staged, denominator);
    m_queued_queue = pred.queue();
    m_has_forward = true;
}

double Loss::queued_loss() const {
    if (!m_queued.sum) throw Error(m_name + ": no queued forward to read");
    return gpu::read_double(m_queued.sum, m_queued_queue) / m_queued.divisor;
}

Tensor Loss::backward() {
    if (!m_has_forward) throw Error(m_name + ": backward before forward");
    return backward_impl();
}

void Loss::release() {
    m_has_forward = false;
    release_impl();
}

void Loss::shape_mismatch(const Tensor& pred, const Tensor& target,
                          const std::string& expected) const {
    throw_mismatch(m_name, pred.shape(), target.shape(), expected);
}

// ---- CrossEntropyLoss -------------------------------------------------------------------

// pred: [B, C] logits, target: [B] class ids -> mean-over-denominator cross-entropy; per
// position ([B, T, C], [B, T]) a sample's loss is its mean over the T positions, so the sum
// over rows is divided by denominator * T.
double CrossEntropyLoss::forward_impl(const Tensor& pred, const Tensor& target,
                                      int64_t denominator) {
    const int64_t rows = check_class_shapes(name(), pred.shape(), target.shape());
    const int64_t classes = pred.shape().back();
    read_class_ids(name(), target, classes, m_ids);
    m_probs = new_like(pred);
    denominator *= rows / std::max<int64_t>(1, pred.dim(0));
    m_denominator = denominator;
    if (void* q = pred.queue()) {
        m_ids_on_gpu = gpu::upload_ids(m_ids, pred.device());
        gpu::DeviceDoubles sums = gpu::device_doubles(pred.device(), rows + 1);
        dispatch_float(pred.dtype(), [&]<class T>() {
            kg::softmax_cross_entropy_forward<T>(
                rows, classes, pred.data<T>(), static_cast<const int64_t*>(m_ids_on_gpu.raw()),
                m_probs.data<T>(), sums.result(1), sums.result(0), q);
        });
        return gpu::read_double(sums.result(0), q) / static_cast<double>(denominator);
    }
    const double sum = dispatch_float(pred.dtype(), [&]<class T>() {
        return kc::softmax_cross_entropy_forward<T>(rows, classes, pred.data<T>(), m_ids.data(),
                                                    m_probs.data<T>());
    });
    return sum / static_cast<double>(denominator);
}

void CrossEntropyLoss::stage_impl(const Tensor& target, const Shape& pred_shape, DType, Device& device,
                                  Tensor& staged) {
    check_class_shapes(name(), pred_shape, target.shape());
    read_class_ids(name(), target, pred_shape.back(), m_ids);  // backward's row count
    gpu::upload_ids_into(m_ids, target.shape(), device, staged, name());
}

Loss::QueuedSum CrossEntropyLoss::queue_impl(const Tensor& pred, const Tensor& staged, int64_t denominator) {
    const int64_t rows = check_class_shapes(name(), pred.shape(), staged.shape());
    m_probs = new_like(pred);
    m_ids_on_gpu = staged;
    m_denominator = denominator * (rows / std::max<int64_t>(1, pred.dim(0)));
    gpu::DeviceDoubles sums = gpu::device_doubles(pred.device(), rows + 1);
    dispatch_float(pred.dtype(), [&]<class T>() {
        kg::softmax_cross_entropy_forward<T>(rows, pred.shape().back(), pred.data<T>(),
                                             static_cast<const int64_t*>(staged.raw()), m_probs.data<T>(),
                                             sums.result(1), sums.result(0), pred.queue());
    });
    m_queued_sums = sums.storage;
    return {sums.result(0), static_cast<double>(m_denominator)};
}

// -> dlogits: [B, C] = (softmax - onehot) / denominator
Tensor CrossEntropyLoss::backward_impl() {
    Tensor d = new_like(m_probs);
    if (void* q = d.queue()) {
        dispatch_float(d.dtype(), [&]<class T>() {
            kg::softmax_cross_entropy_backward<T>(
                static_cast<int64_t>(m_ids.size()), m_probs.shape().back(), m_probs.data<T>(),
                static_cast<const int64_t*>(m_ids_on_gpu.raw()),
                static_cast<T>(1.0 / static_cast<double>(m_denominator)), d.data<T>(), q);
        });
        return d;
    }
    dispatch_float(d.dtype(), [&]<class T>() {
        kc::softmax_cross_entropy_backward<T>(
            static_cast<int64_t>(m_ids.size()), m_probs.shape().back(), m_probs.data<T>(), m_ids.data(),
            static_cast<T>(1.0 / static_cast<double>(m_denominator)), d.data<T>());
    });
    return d;
}

// ---- MseLoss ------------------------------------------------------------------------------

// pred, target: [B, ...] -> sum over samples of mean((pred - target)^2) / denominator
double MseLoss::forward_impl(const Tensor& pred, const Tensor& target, int64_t denominator) {
    if (target.shape() != pred.shape())
        shape_mismatch(pred, target, "expected a target shaped like the prediction");
    m_pred = pred;
    m_target = gpu::on_device(target, pred.device(), MemCategory::activations).to(pred.dtype());
    m_denominator = denominator;
    const int64_t per_sample = pred.shape().drop_first().numel();
    if (void* q = pred.queue()) {
        gpu::DeviceDoubles sum = gpu::device_doubles(pred.device(), 1);
        dispatch_float(pred.dtype(), [&]<class T>() {
            kg::squared_error_sum<T>(pred.numel(), pred.data<T>(), m_target.data<T>(),
                                     sum.result(), sum.scratch(), q);
        });
        return gpu::read_double(sum.result(), q) /
               (static_cast<double>(per_sample) * static_cast<double>(denominator));
    }
    const double sum = dispatch_float(pred.dtype(), [&]<class T>() {
        return kc::squared_error_sum<T>(pred.numel(), pred.data<T>(), m_target.data<T>());
    });
    return sum / (static_cast<double>(per_sample) * static_cast<double>(denominator));
}

void MseLoss::stage_impl(const Tensor& target, const Shape& pred_shape, DType pred_dtype, Device& device,
                         Tensor& staged) {
    if (target.shape() != pred_shape)
        throw_mismatch(name(), pred_shape, target.shape(), "expected a target shaped like the prediction");
    const Tensor t = gpu::on_device(target, device, MemCategory::activations).to(pred_dtype);
    if (!staged.defined()) staged = Tensor::empty(pred_shape, pred_dtype, device, MemCategory::activations);
    staged.copy_from(t);
}

Loss::QueuedSum MseLoss::queue_impl(const Tensor& pred, const Tensor& staged, int64_t denominator) {
    if (staged.shape() != pred.shape() || staged.dtype() != pred.dtype())
        shape_mismatch(pred, staged, "expected a staged target shaped like the prediction");
    m_pred = pred;
    m_target = staged;
    m_denominator = denominator;
    gpu::DeviceDoubles sum = gpu::device_doubles(pred.device(), 1);
    dispatch_float(pred.dtype(), [&]<class T>() {
        kg::squared_error_sum<T>(pred.numel(), pred.data<T>(), staged.data<T>(), sum.result(), sum.scratch(),
                                 pred.queue());
    });
    m_queued_sums = sum.storage;
    const int64_t per_sample = pred.shape().drop_first().numel();
    return {sum.result(), static_cast<double>(per_sample) * static_cast<double>(denominator)};
}

// -> dpred: [B, ...] = 2 (pred - target) / (per-sample elements * denominator)
Tensor MseLoss::backward_impl() {
    Tensor d = new_like(m_pred);
    const int64_t per_sample = m_pred.shape().drop_first().numel();
    const double scale =
        2.0 / (static_cast<double>(per_sample) * static_cast<double>(m_denominator));
    if (void* q = d.queue()) {
        dispatch_float(d.dtype(), [&]<class T>() {
            kg::squared_error_backward<T>(d.numel(), m_pred.data<T>(), m_target.data<T>(),
                                          static_cast<T>(scale), d.data<T>(), q);
        });
        return d;
    }
    dispatch_float(d.dtype(), [&]<class T>() {
        kc::squared_error_backward<T>(d.numel(), m_pred.data<T>(), m_target.data<T>(),
                                      static_cast<T>(scale), d.data<T>());
    });
    return d;
}

// ---- free functions -----------------------------------------------------------------------

std::unique_ptr<Loss> make_loss(const std::string& name) {
    if (name == "cross_entropy") return std::make_unique<CrossEntropyLoss>();
    if (name == "mse") return std::make_unique<MseLoss>();
    throw ConfigError("unknown loss '" + name + "': expected cross_entropy or mse");
}

// logits: [B, C], target: [B] (or [B, T, C] and [B, T]) -> count of rows with argmax == target
int64_t count_correct(const Tensor& logits_anywhere, const Tensor& target) {
    const Tensor logits = gpu::on_host(logits_anywhere);
    const int64_t rows = check_class_shapes("count_correct", logits.shape(), target.shape());
    const int64_t classes = logits.shape().back();
    std::vector<int64_t> ids, best(static_cast<size_t>(rows));
    read_class_ids("count_correct", target, classes, ids);
    dispatch_float(logits.dtype(), [&]<class T>() {
        kc::argmax_rows<T>(rows, classes, logits.data<T>(), best.data());
    });
    int64_t correct = 0;
    for (int64_t r = 0; r < rows; ++r)
        correct += best[static_cast<size_t>(r)] == ids[static_cast<size_t>(r)];
    return correct;
}

}  // namespace paralab::nn
