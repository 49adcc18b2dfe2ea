#include "engine/device/gpu_values.h"

#include <kernels/gpu/memory.h>
#include <kernels/gpu/reduce.h>
#include <kernels/gpu/stream.h>

#include "engine/device/device.h"
#include "engine/util/error.h"

namespace paralab::gpu {

namespace kg = kernels::gpu;

Tensor on_host(const Tensor& t) {
    if (!t.defined() || !t.on_gpu()) return t;
    Tensor h = Tensor::empty(t.shape(), t.dtype(), detached_host_device(), MemCategory::workspace);
    h.copy_from(t);
    return h;
}

Tensor on_device(const Tensor& t, Device& device, MemCategory category) {
    if (&t.device() == &device) return t;
    Tensor d = Tensor::empty(t.shape(), t.dtype(), device, category);
    d.copy_from(t);
    return d;
}

double* DeviceDoubles::scratch() const {
    return static_cast<double*>(storage.raw()) + (storage.numel() - kg::kReduceScratch);
}

DeviceDoubles device_doubles(Device& device, int64_t count) {
    return {Tensor::empty(Shape{count + kg::kReduceScratch}, DType::f64, device, MemCategory::workspace)};
}

std::vector<double> read_doubles(const double* device_values, int64_t count, void* queue) {
    std::vector<double> out(static_cast<size_t>(count));
    if (count == 0) return out;
    kg::copy_device_to_host_async(out.data(), device_values, out.size() * sizeof(double), queue);
    kg::stream_synchronize(queue);
    return out;
}

Tensor upload(const void* host, int64_t count, DType dtype, Device& device) {
    Tensor t = Tensor::empty(Shape{count}, dtype, device, MemCategory::workspace);
    // From pageable memory the runtime stages the bytes before it returns (tensor.cpp).
    if (count > 0) kg::copy_host_to_device_async(t.raw(), host, t.nbytes(), device.queue());
    return t;
}

Tensor upload_ids(const std::vector<int64_t>& ids, Device& device) {
    static_assert(sizeof(int64_t) == sizeof(double));
    return upload(ids.data(), static_cast<int64_t>(ids.size()), DType::f64, device);
}

void upload_ids_into(const std::vector<int64_t>& ids, const Shape& shape, Device& device, Tensor& staged,
                     const std::string& who) {
    static_assert(sizeof(int64_t) == sizeof(double));
    if (!staged.defined()) staged = Tensor::empty(shape, DType::f64, device, MemCategory::activations);
    if (staged.shape() != shape)
        throw ShapeError(who + ": staged ids " + staged.shape().to_string() + " for " + shape.to_string());
    kg::copy_host_to_device_async(staged.raw(), ids.data(), ids.size() * sizeof(int64_t), staged.queue());
}

}  // namespace paralab::gpu
