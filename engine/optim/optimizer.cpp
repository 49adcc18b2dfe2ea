#include "engine/optim/optimizer.h"

#include <cmath>
#include <sstream>

#include "engine/device/device.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"

namespace paralab::optim {

namespace {

// Shortest text that reads back as the value: -1 prints "-1", 0.9 prints "0.9".
std::string number_text(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

void require(bool ok, const std::string& field, const std::string& expected, double got) {
    if (!ok)
        throw ConfigError("optimizer." + field + ": expected " + expected + ", got " +
                          number_text(got));
}

std::string param_text(size_t i, const nn::Param& p) {
    return "parameter " + std::to_string(i) + " ('" + p.name + "')";
}

}  // namespace

void validate_optimizer_config(const OptimizerConfig& c) {
    if (c.type != "sgd" && c.type != "adam" && c.type != "adamw")
        throw ConfigError("optimizer.type", "unknown optimizer '" + c.type +
                          "'; expected sgd, adam or adamw");
    // Written as !(x in range) so that NaN fails too.
    require(c.lr > 0 && std::isfinite(c.lr), "lr", "a positive number", c.lr);
    require(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "weight_decay",
            "a non-negative number", c.weight_decay);
    require(c.momentum >= 0 && c.momentum < 1, "momentum", "a number in [0, 1)", c.momentum);
    if (c.nesterov && !(c.momentum > 0))
        throw ConfigError("optimizer.nesterov", "needs a momentum greater than 0");
    if (!(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1))
        throw ConfigError("optimizer.betas", "expected two numbers in [0, 1), got [" +
                          number_text(c.beta1) + ", " + number_text(c.beta2) + "]");
    require(c.eps > 0 && std::isfinite(c.eps), "eps", "a positive number", c.eps);
}

Optimizer::Optimizer(OptimizerConfig config) : m_config(std::move(config)) {
    validate_optimizer_config(m_config);
}

Optimizer::~Optimizer() = default;

void Optimizer::check_params(const std::vector<nn::Param*>& params) const {
    if (m_layout_known && params.size() != m_shapes.size())
        throw Error("optimizer: given " + std::to_string(params.size()) +
                    " parameters, but it updates " + std::to_string(m_shapes.size()) +
                    " (the same parameters must be passed to every step)");
    for (size_t i = 0; i < params.size(); ++i) {
        PARALAB_CHECK(params[i] != nullptr, "null parameter " + std::to_string(i));
        const nn::Param& p = *params[i];
        if (!p.value.defined())
            throw Error("optimizer: " + param_text(i, p) + " has no value");
        if (p.value.dtype() != DType::f32 && p.value.dtype() != DType::f64)
            throw Error("optimizer: " + param_text(i, p) + " is " +
                        std::string(dtype_name(p.value.dtype())) + "; expected f32 or f64");
        // One step updates the parameters of one device: on a GPU, in one multi-tensor launch.
        if (&p.value.device() != &params.front()->value.device() ||
            (p.value.on_gpu() && p.value.dtype() != params.front()->value.dtype()))
            throw Error("optimizer: " + param_text(i, p) + " is " +
                        std::string(dtype_name(p.value.dtype())) + " on " + p.value.device().name() +
                        ", parameter 0 " + std::string(dtype_name(params.front()->value.dtype())) +
                        " on " + params.front()->value.device().name() +
                        "; one optimizer updates parameters of one device (and, on a GPU, one dtype)");
        if (!p.grad.defined() || p.grad.shape() != p.value.shape() ||
            p.grad.dtype() != p.value.dtype())
            throw Error("optimizer: " + param_text(i, p) + " " + p.value.shape().to_string() +
                        " " + std::string(dtype_name(p.value.dtype())) +
                        " has no gradient of its shape and dtype");
        if (m_layout_known && (p.value.shape() != m_shapes[i] || p.value.dtype() != m_dtypes[i]))
            throw Error("optimizer: " + param_text(i, p) + " is " + p.value.shape().to_string() +
                        " " + std::string(dtype_name(p.value.dtype())) + ", but was " +
                        m_shapes[i].to_string() + " " + std::string(dtype_name(m_dtypes[i])) +
                        " (the same parameters must be passed to every step)");
    }
}

void Optimizer::remember_layout(const std::vector<nn::Param*>& params) {
    m_layout_known = true;
    m_shapes.clear();
    m_dtypes.clear();
    for (const nn::Param* p : params) {
        m_shapes.push_back(p->value.shape());
        m_dtypes.push_back(p->value.dtype());
    }
}

void Optimizer::step(const std::vector<nn::Param*>& params, double lr) {
    if (!(lr >= 0) || !std::isfinite(lr))
        throw Error("optimizer: step with the learning rate " + number_text(lr) +
                    "; expected a finite number >= 0");
    check_params(params);
    if (!m_layout_known) {
        remember_layout(params);
        const size_t per_param = state_names().size();
        m_state.assign(params.size(), {});
        for (size_t i = 0; i < params.size(); ++i) {
            const Tensor& v = params[i]->value;
            for (size_t k = 0; k < per_param; ++k)
                m_state[i].push_back(Tensor::zeros(v.shape(), v.dtype(), v.device(),
                                                   MemCategory::optimizer_state));
        }
    }
    ++m_steps;
    step_impl(params, lr);
}

int64_t Optimizer::state_bytes() const {
    int64_t n = 0;
    for (const auto& s : m_state)
        for (const auto& t : s) n += static_cast<int64_t>(t.nbytes());
    return n;
}

void Optimizer::load_state(const std::vector<nn::Param*>& params,
                           const std::vector<std::vector<Tensor>>& state, int64_t steps_taken) {
    if (steps_taken < 0)
        throw Error("optimizer: cannot restore a negative step count " + std::to_string(steps_taken));
    check_params(params);
    const size_t per_param = state_names().size();
    if (state.size() != params.size())
        throw Error("optimizer: state for " + std::to_string(state.size()) + " parameters, given " +
                    std::to_string(params.size()) + " parameters");
    // Built aside and swapped in, so that a bad checkpoint leaves this optimizer as it was.
    std::vector<std::vector<Tensor>> fresh(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
        const nn::Param& p = *params[i];
        if (state[i].size() != per_param)
            throw Error("optimizer: " + param_text(i, p) + " has " +
                        std::to_string(state[i].size()) + " state tensors; expected " +
                        std::to_string(per_param));
        for (const Tensor& s : state[i]) {
            if (!s.defined() || s.shape() != p.value.shape())
                throw Error("optimizer: state of " + param_text(i, p) + " is " +
                            (s.defined() ? s.shape().to_string() : std::string("undefined")) +
                            "; expected " + p.value.shape().to_string());
            Tensor t = Tensor::empty(p.value.shape(), p.value.dtype(), p.value.device(),
                                     MemCategory::optimizer_state);
            t.copy_from(s);
            fresh[i].push_back(std::move(t));
        }
    }
    remember_layout(params);
    m_state = std::move(fresh);
    m_steps = steps_taken;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config) {
    validate_optimizer_config(config);
    if (config.type == "sgd") return std::make_unique<Sgd>(config);
    return std::make_unique<Adam>(config);
}

}  // namespace paralab::optim
