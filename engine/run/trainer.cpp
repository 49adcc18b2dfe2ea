#include "engine/run/trainer.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "engine/data/loader.h"
#include "engine/device/device.h"
#include "engine/nn/model.h"
#include "engine/optim/clip.h"

namespace paralab::run {

RunObserver::~RunObserver() = default;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// Rows [offset, offset+count) of a host batch as device tensors.
struct DeviceBatch {
    Tensor x, y;
};

DeviceBatch to_device(const data::Batch& b, int64_t offset, int64_t count, const data::Dataset& ds,
                      const Shape& input, Device& device) {
    DeviceBatch out;
    out.x = Tensor::empty(input.with_batch(count), DType::f32, device, MemCategory::activations);
    std::memcpy(out.x.raw(), b.inputs.data() + offset * ds.sample_numel(), out.x.nbytes());
    const Shape target = ds.target_shape.empty() ? Shape{count}
                                                 : Shape(ds.target_shape).with_batch(count);
    out.y = Tensor::empty(target, DType::f32, device, MemCategory::activations);
    std::memcpy(out.y.raw(), b.targets.data() + offset * ds.target_numel(), out.y.nbytes());
    return out;
}

// Refuses, before any step runs, a model whose output cannot meet the data and the loss.
void check_model_fits_data(const nn::Model& model, const data::Dataset& ds, const std::string& loss) {
    const Shape& out = model.output_shape();
    if (loss == "cross_entropy") {
        if (ds.num_classes == 0)
            throw ConfigError("model.loss: cross_entropy needs class labels, but the " + ds.name +
                              " data set is a regression set (use \"mse\")");
        if (out.rank() != 1)
            throw ConfigError("model: the last layer gives " + out.to_string() +
                              " per example; cross_entropy needs class scores [" +
                              std::to_string(ds.num_classes) + "] (add a flatten and a linear layer)");
        if (out[0] < ds.num_classes)
            throw ConfigError("model: the last layer gives " + std::to_string(out[0]) +
                              " class scores, but the " + ds.name + " data set has " +
                              std::to_string(ds.num_classes) + " classes");
    } else {
        const Shape target = ds.target_shape.empty() ? Shape{1} : Shape(ds.target_shape);
        if (ds.num_classes > 0 && ds.target_shape.empty())
            throw ConfigError("model.loss: mse needs regression targets, but the " + ds.name +
                              " data set has class labels (use \"cross_entropy\")");
        if (out != target)
            throw ConfigError("model: the last layer gives " + out.to_string() +
                              " per example, but the " + ds.name + " data set's targets are " +
                              target.to_string());
    }
}

EvalResult evaluate(nn::Model& model, const data::Dataset& test, int64_t batch_size,
                    const Shape& input, Device& device) {
    EvalResult r;
    if (test.size() == 0) return r;
    data::DataLoader::Options opt;
    opt.batch_size = batch_size;
    opt.shuffle = false;
    data::DataLoader loader(test, opt);
    loader.start_epoch(0);
    data::Batch b;
    double loss_sum = 0;
    int64_t correct = 0;
    while (loader.next(b)) {
        DeviceBatch db = to_device(b, 0, b.size, test, input, device);
        Tensor out = model.forward(db.x, nn::Mode::eval);
        loss_sum += model.loss().forward(out, db.y, 1);  // a sum over the batch
        if (test.num_classes > 0) correct += nn::count_correct(out, db.y);
        r.samples += b.size;
    }
    r.loss = loss_sum / static_cast<double>(r.samples);
    if (test.num_classes > 0) r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
    return r;
}

}  // namespace

RunSummary run_experiment(const Experiment& e, RunObserver* observer, RunControl* control,
                          int compute_threads) {
    RunSummary summary;
    summary.name = e.name;
    summary.strategy = e.strategy.type;
    summary.devices = e.devices;

    // ---- what this build can run --------------------------------------------------------
    if (e.strategy.type != "single" || e.devices.size() != 1)
        throw ConfigError("strategy: this build runs the single strategy on one device; \"" +
                          e.strategy.type + "\" on " + std::to_string(e.devices.size()) +
                          " device(s) is not available yet");
    const DeviceId device_id = parse_device_id(e.devices[0]);
    if (device_id.kind != DeviceKind::cpu)
        throw ConfigError("devices[0]: " + e.devices[0] +
                          " is a GPU, and this build has no CUDA training backend; use cpu:0");
    if (e.train.precision != "fp32")
        throw ConfigError("train.precision: " + e.train.precision +
                          " mixed precision needs CUDA devices; CPU devices train in fp32");

    // ---- data, model, optimizer ---------------------------------------------------------
    data::DataSplits splits = data::load_data(e.data, e.seed);
    const data::Dataset& train = splits.train;
    if (train.size() == 0) throw ConfigError("data: the training split is empty");
    const Shape data_shape(train.sample_shape);
    const Shape input = e.input.value_or(data_shape);
    if (input != data_shape)
        throw ConfigError("model.input: " + input.to_string() + " does not match the " + train.name +
                          " examples, which are " + data_shape.to_string());

    auto device = make_cpu_device(device_id.index, compute_threads);
    device->make_current();
    nn::Model model(e.layers, input, e.loss, DType::f32, *device);
    check_model_fits_data(model, train, e.loss);
    Rng init_rng(e.seed);
    model.reset_parameters(init_rng);
    auto params = model.parameters();
    summary.parameters = model.parameter_count();

    auto optimizer = optim::make_optimizer(e.optimizer);
    data::DataLoader::Options lopt;
    lopt.batch_size = e.data.batch_size;
    lopt.shuffle = e.data.shuffle;
    lopt.seed = e.seed;
    lopt.workers = e.data.workers;
    data::DataLoader loader(train, lopt);
    const int64_t steps_per_epoch = loader.batches_per_epoch();
    int64_t total_steps = steps_per_epoch * e.train.epochs;
    if (e.train.max_steps) total_steps = std::min(total_steps, *e.train.max_steps);
    auto schedule = optim::make_schedule(e.schedule, e.optimizer.lr, total_steps);
    if (observer) observer->on_start(e, total_steps);

    // ---- the loop -------------------------------------------------------------------------
    const auto t0 = Clock::now();
    double eval_s = 0;  // evaluation time inside the loop, excluded from throughput
    int64_t step = 0, samples = 0;
    data::Batch batch;
    try {
        for (int64_t epoch = 0; epoch < e.train.epochs && step < total_steps; ++epoch) {
            summary.epochs = epoch + 1;
            loader.start_epoch(epoch);
            while (step < total_steps) {
                if (control && control->stop.load()) {
                    summary.status = "stopped";
                    break;
                }
                const auto t_wait = Clock::now();
                if (!loader.next(batch)) break;
                const auto t_start = Clock::now();

                // One optimizer step over the whole batch, in grad_accum micro-batches whose
                // gradients sum to the full batch's (the loss is divided by the full batch).
                // Forward (with the loss) and backward of every micro-batch add up to one span each.
                double forward_s = 0, backward_s = 0;
                model.zero_grad();
                double loss_sum = 0;
                const int64_t parts = std::min<int64_t>(e.train.grad_accum, batch.size);
                for (int64_t k = 0; k < parts; ++k) {
                    const auto shard = data::shard_of_batch(batch.size, static_cast<int>(k),
                                                            static_cast<int>(parts));
                    DeviceBatch db = to_device(batch, shard.offset, shard.count, train, input, *device);
                    model.set_random_state(e.seed, static_cast<uint64_t>(step), shard.offset);
                    const auto t_f = Clock::now();
                    Tensor out = model.forward(db.x, nn::Mode::train);
                    loss_sum += model.loss().forward(out, db.y, batch.size) * batch.size;
                    const auto t_b = Clock::now();
                    model.backward(model.loss().backward());
                    forward_s += seconds_between(t_f, t_b);
                    backward_s += seconds_between(t_b, Clock::now());
                }
                const double loss = loss_sum / static_cast<double>(batch.size);
                if (!std::isfinite(loss))
                    throw Error("the training loss became " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                                " at step " + std::to_string(step + 1) + " (epoch " +
                                std::to_string(epoch + 1) +
                                "); the model diverged: lower optimizer.lr or set train.clip_norm");
                double grad_norm = 0;
                if (e.train.clip_norm) grad_norm = optim::clip_grad_norm(params, *e.train.clip_norm);
                const double lr = schedule->lr_at(step);
                const auto t_opt = Clock::now();
                optimizer->step(params, lr);
                ++step;
                samples += batch.size;
                const auto t_end = Clock::now();

                StepRecord rec;
                rec.step = step;
                rec.epoch = epoch;
                rec.steps_per_epoch = steps_per_epoch;
                rec.total_steps = total_steps;
                rec.device = device->name();
                rec.loss = loss;
                rec.samples = batch.size;
                rec.lr = lr;
                rec.wall_s = std::chrono::duration<double>(t_end - t0).count() - eval_s;
                rec.compute_ms = ms_between(t_start, t_end);
                rec.data_wait_ms = ms_between(t_wait, t_start);
                rec.grad_norm = grad_norm;
                rec.memory = device->allocator().stats();
                summary.final_loss = loss;
                if (observer) {
                    const double base = seconds_between(t0, t_wait) - eval_s;
                    const double start = base + seconds_between(t_wait, t_start);
                    const double opt_begin = rec.wall_s - seconds_between(t_opt, t_end);
                    auto span = [&](const char* phase, double b, double e) {
                        Span sp;
                        sp.step = step;
                        sp.device = rec.device;
                        sp.phase = phase;
                        sp.t_begin = b;
                        sp.t_end = e;
                        observer->on_span(sp);
                    };
                    span("data_wait", base, start);
                    span("forward", start, start + forward_s);
                    span("backward", start + forward_s, start + forward_s + backward_s);
                    span("optimizer", opt_begin, rec.wall_s);
                    observer->on_step(rec);
                }

                if (e.train.eval_every > 0 && step % e.train.eval_every == 0 && step < total_steps &&
                    splits.test.size() > 0) {
                    const auto te = Clock::now();
                    EvalResult ev = evaluate(model, splits.test, std::max<int64_t>(256, e.data.batch_size), input, *device);
                    ev.step = step;
                    eval_s += std::chrono::duration<double>(Clock::now() - te).count();
                    if (observer) observer->on_eval(ev);
                }
            }
            if (summary.status == "stopped") break;
        }
    } catch (const Error& err) {
        summary.status = "failed";
        summary.error = err.what();
    } catch (const std::bad_alloc&) {
        summary.status = "failed";
        summary.error = device->name() + ": out of host memory";
    }
    summary.steps = step;
    summary.wall_s = std::chrono::duration<double>(Clock::now() - t0).count() - eval_s;
    summary.samples_per_s = summary.wall_s > 0 ? samples / summary.wall_s : 0;

    if (summary.status == "finished" && splits.test.size() > 0) {
        try {
            EvalResult ev = evaluate(model, splits.test, std::max<int64_t>(256, e.data.batch_size), input, *device);
            ev.step = step;
            summary.test_loss = ev.loss;
            summary.test_accuracy = ev.accuracy;
            if (observer) observer->on_eval(ev);
        } catch (const Error& err) {
            summary.status = "failed";
            summary.error = std::string("evaluation failed: ") + err.what();
        }
    }
    summary.peak_memory_bytes[device->name()] = device->allocator().stats().peak_total;
    if (observer) observer->on_finish(summary);
    return summary;
}

}  // namespace paralab::run
