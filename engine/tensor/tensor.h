// Tensor: shape, dtype, device and contiguous storage from the device's allocator.
// Copies share storage (like a shared_ptr); `clone()` copies the data.
#pragma once

#include <memory>
#include <span>

#include "engine/tensor/allocator.h"
#include "engine/tensor/dtype.h"
#include "engine/tensor/shape.h"

namespace paralab {

class Device;

// One allocation; returned to its device's allocator when the last tensor viewing it goes.
class Storage {
public:
    Storage(Device& device, size_t bytes, MemCategory category);
    ~Storage();
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    void* data() const { return m_data; }
    size_t bytes() const { return m_bytes; }
    MemCategory category() const { return m_category; }
    Device& device() const { return *m_device; }
    // The device's queue (a GPU's compute stream), nullptr for host memory.
    void* queue() const { return m_queue; }

private:
    Device* m_device;
    void* m_queue;
    void* m_data;
    size_t m_bytes;
    MemCategory m_category;
};

class Tensor {
public:
    Tensor() = default;  // undefined tensor: defined() is false

    // Uninitialised memory.
    static Tensor empty(const Shape& shape, DType dtype, Device& device, MemCategory category);
    static Tensor zeros(const Shape& shape, DType dtype, Device& device, MemCategory category);

    bool defined() const { return m_storage != nullptr; }
    const Shape& shape() const { return m_shape; }
    int64_t dim(size_t i) const { return m_shape[i]; }
    size_t rank() const { return m_shape.rank(); }
    int64_t numel() const { return m_shape.numel(); }
    DType dtype() const { return m_dtype; }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(m_dtype); }
    Device& device() const { return m_storage->device(); }
    MemCategory category() const { return m_storage->category(); }
    // True when the elements live in GPU memory: data<T>() is then a device pointer for the
    // GPU kernels, and span<T>() throws (the host cannot read them; copy to a host tensor).
    bool on_gpu() const { return m_storage && m_storage->queue() != nullptr; }
    // The queue GPU kernels on this tensor are ordered on (nullptr for a host tensor).
    void* queue() const { return m_storage ? m_storage->queue() : nullptr; }

    void* raw() const {
        return m_storage ? static_cast<char*>(m_storage->data()) + m_offset : nullptr;
    }

    // Typed pointer; throws when T does not match dtype().
    template <class T>
    T* data() const {
        if (dtype_of<T>() != m_dtype) type_mismatch(dtype_of<T>());
        return static_cast<T*>(raw());
    }
    template <class T>
    std::span<T> span() const {
        if (on_gpu()) host_access_error();
        return {data<T>(), static_cast<size_t>(numel())};
    }

    // Same storage, new shape with the same element count.
    Tensor reshape(const Shape& shape) const;
    // A tensor of `shape` over this one's elements [offset, offset + shape.numel()): the same
    // storage, so writes through either are seen by both (DDP keeps each bucket's gradients as
    // views of one buffer that it all-reduces in place). Throws ShapeError past the end.
    Tensor view(int64_t offset, const Shape& shape) const;

    // On any device; on a GPU, ordered on its queue.
    void fill(double value) const;
    void zero() const;
    // Copies values from `src` (same element count; dtype converted between f32 and f64), also
    // between host and GPU and between GPUs. A copy into host memory has arrived on return; a
    // copy into a GPU is ordered on the destination's queue after the source's queued work.
    void copy_from(const Tensor& src) const;
    Tensor clone(MemCategory category) const;
    // The same values as a tensor of `dtype` (a copy; the same tensor when dtype matches).
    Tensor to(DType dtype) const;

    // True when both tensors view the same allocation.
    bool same_storage(const Tensor& other) const { return m_storage == other.m_storage; }

private:
    [[noreturn]] void type_mismatch(DType requested) const;
    [[noreturn]] void host_access_error() const;

    std::shared_ptr<Storage> m_storage;
    size_t m_offset = 0;  // bytes into the storage (views)
    Shape m_shape;
    DType m_dtype = DType::f32;
};

}  // namespace paralab
