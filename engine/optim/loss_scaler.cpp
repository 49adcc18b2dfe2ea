#include "engine/optim/loss_scaler.h"

#include <kernels/gpu/loss_scale.h>
#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include <cmath>
#include <string>

#include "engine/device/device.h"
#include "engine/util/error.h"

namespace paralab::optim {

namespace kg = kernels::gpu;

LossScaler::LossScaler(double initial_scale, double growth_factor, double backoff_factor,
                       int64_t growth_interval)
    : m_scale(initial_scale), m_growth(growth_factor), m_backoff(backoff_factor), m_interval(growth_interval) {
    if (!(initial_scale > 0) || !(growth_factor > 1) || !(backoff_factor > 0 && backoff_factor < 1) ||
        growth_interval < 1)
        throw Error("loss scaler: needs scale > 0, growth > 1, 0 < backoff < 1 and interval >= 1");
}

bool LossScaler::unscale(const std::vector<nn::Param*>& params) {
    if (params.empty()) return true;
    return unscale(params, params.front()->grad.device(), {});
}

bool LossScaler::unscale(const std::vector<nn::Param*>& params, Device& device,
                         const std::function<void(float* found_inf)>& agree) {
    const bool found_inf = unscale_checking(params, device, m_scale, agree);
    update(found_inf);
    return !found_inf;
}

void LossScaler::update(bool found_inf) {
    if (found_inf) {
        m_scale *= m_backoff;
        m_clean = 0;
        ++m_skipped;
        return;
    }
    if (++m_clean == m_interval) {
        const double grown = m_scale * m_growth;
        if (std::isfinite(grown)) m_scale = grown;
        m_clean = 0;
    }
}

bool unscale_checking(const std::vector<nn::Param*>& params, Device& device, double scale,
                      const std::function<void(float* found_inf)>& agree) {
    PARALAB_CHECK(device.is_gpu(), "loss scaler: f32 gradients on a GPU");
    void* q = device.queue();
    std::vector<float*> grads;
    std::vector<int64_t> sizes;
    for (const nn::Param* p : params) {
        PARALAB_CHECK(p->grad.defined() && p->grad.queue() == q && p->grad.dtype() == DType::f32,
                      "loss scaler: f32 gradients on one GPU");
        grads.push_back(p->grad.data<float>());
        sizes.push_back(p->grad.numel());
    }
    // [found_inf, inv_scale] on the device.
    Tensor flags = Tensor::empty(Shape{2}, DType::f32, device, MemCategory::workspace);
    const float init[2] = {0.0f, static_cast<float>(1.0 / scale)};
    kg::copy_host_to_device_async(flags.raw(), init, sizeof init, q);
    float* found = flags.data<float>();
    if (!grads.empty())
        kg::non_finite_check_and_unscale_multi<float>(static_cast<int64_t>(grads.size()), grads.data(),
                                                      sizes.data(), found, found + 1, q);
    if (agree) agree(found);
    float found_inf = 0;
    kg::copy_device_to_host_async(&found_inf, found, sizeof found_inf, q);
    kg::stream_synchronize(q);
    return found_inf != 0.0f;
}

}  // namespace paralab::optim
