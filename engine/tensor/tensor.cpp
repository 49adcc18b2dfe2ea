#include "engine/tensor/tensor.h"

#include <cstring>

#include <kernels/gpu/memory.h>
#include <kernels/gpu/stream.h>

#include "engine/device/device.h"

namespace paralab {

Storage::Storage(Device& device, size_t bytes, MemCategory category)
    : m_device(&device),
      m_queue(device.queue()),
      m_data(device.is_meta() ? nullptr : device.allocator().allocate(bytes, category)),
      m_bytes(bytes),
      m_category(category) {}

Storage::~Storage() {
    if (!m_device->is_meta()) m_device->allocator().deallocate(m_data, m_bytes, m_category);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device& device, MemCategory category) {
    for (int64_t d : shape.dims())
        if (d < 0) throw ShapeError("negative extent in tensor shape " + shape.to_string());
    const int64_t n = shape.numel();
    if (n > INT64_MAX / static_cast<int64_t>(dtype_size(dtype)))
        throw ShapeError("a tensor of shape " + shape.to_string() + " has more bytes than a 64-bit count holds");
    Tensor t;
    t.m_shape = shape;
    t.m_dtype = dtype;
    t.m_storage = std::make_shared<Storage>(device, static_cast<size_t>(n) * dtype_size(dtype), category);
    return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device& device, MemCategory category) {
    Tensor t = empty(shape, dtype, device, category);
    t.zero();
    return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
    if (shape.numel() != numel())
        throw ShapeError("cannot reshape " + m_shape.to_string() + " to " + shape.to_string());
    Tensor t = *this;
    t.m_shape = shape;
    return t;
}

Tensor Tensor::view(int64_t offset, const Shape& shape) const {
    if (offset < 0 || offset + shape.numel() > numel())
        throw ShapeError("a view of " + shape.to_string() + " at element " + std::to_string(offset) +
                         " does not fit in " + m_shape.to_string());
    Tensor t = *this;
    t.m_shape = shape;
    t.m_offset = m_offset + static_cast<size_t>(offset) * dtype_size(m_dtype);
    return t;
}

namespace kg = kernels::gpu;

namespace {

// The same values as `t` in a host tensor of `dtype` (a copy).
Tensor host_copy(const Tensor& t, DType dtype) {
    Tensor h = Tensor::empty(t.shape(), dtype, detached_host_device(), MemCategory::workspace);
    h.copy_from(t);
    return h;
}

}  // namespace

void Tensor::fill(double value) const {
    if (!defined() || m_storage->device().is_meta()) return;
    if (on_gpu()) {
        if (value == 0.0) return zero();
        Tensor h = Tensor::empty(m_shape, m_dtype, detached_host_device(), MemCategory::workspace);
        h.fill(value);
        copy_from(h);
        return;
    }
    dispatch_float(m_dtype, [&]<class T>() {
        T* p = data<T>();
        const T v = static_cast<T>(value);
        for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = v;
    });
}

void Tensor::zero() const {
    if (!defined() || m_storage->device().is_meta()) return;
    if (on_gpu()) kg::fill_bytes_async(raw(), 0, nbytes(), queue());
    else std::memset(raw(), 0, nbytes());
}

void Tensor::copy_from(const Tensor& src) const {
    if (src.numel() != numel())
        throw ShapeError("copy from " + src.shape().to_string() + " into " + m_shape.to_string());
    if (on_gpu() || src.on_gpu()) {
        if (src.dtype() != m_dtype) {
            // Converted on the host: rare (the f64 references of the tests), never per step.
            copy_from(host_copy(src, m_dtype));
            return;
        }
        if (raw() == src.raw() || nbytes() == 0) return;
        if (!src.on_gpu()) {
            // From pageable host memory the runtime stages the bytes before it returns, so
            // `src` may go at once; the copy is ordered after this queue's earlier kernels.
            kg::copy_host_to_device_async(raw(), src.raw(), nbytes(), queue());
        } else if (!on_gpu()) {
            kg::copy_device_to_host_async(raw(), src.raw(), nbytes(), src.queue());
            kg::stream_synchronize(src.queue());
        } else if (queue() == src.queue()) {
            kg::copy_device_to_device_async(raw(), src.raw(), nbytes(), queue());
        } else {
            // Two devices (or two virtual GPUs): the source's kernels first, and the source
            // may be reused by its queue as soon as this returns.
            kg::stream_synchronize(src.queue());
            kg::copy_device_to_device_async(raw(), src.raw(), nbytes(), queue());
            kg::stream_synchronize(queue());
        }
        return;
    }
    if (src.dtype() == m_dtype) {
        if (raw() != src.raw()) std::memcpy(raw(), src.raw(), nbytes());
        return;
    }
    dispatch_float(m_dtype, [&]<class T>() {
        dispatch_float(src.dtype(), [&]<class S>() {
            T* d = data<T>();
            const S* s = src.data<S>();
            for (int64_t i = 0, n = numel(); i < n; ++i) d[i] = static_cast<T>(s[i]);
        });
    });
}

Tensor Tensor::clone(MemCategory category) const {
    if (!defined()) return Tensor();
    Tensor t = empty(m_shape, m_dtype, device(), category);
    t.copy_from(*this);
    return t;
}

Tensor Tensor::to(DType dtype) const {
    if (dtype == m_dtype) return *this;
    Tensor t = empty(m_shape, dtype, device(), category());
    t.copy_from(*this);
    return t;
}

void Tensor::host_access_error() const {
    throw Error("a tensor " + m_shape.to_string() + " on " + device().name() +
                " read or written on the host (copy it to a host tensor first)");
}

void Tensor::type_mismatch(DType requested) const {
    throw Error("tensor of " + std::string(dtype_name(m_dtype)) + " accessed as " +
                std::string(dtype_name(requested)));
}

}  // namespace paralab
