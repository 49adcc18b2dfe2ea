// Small host <-> GPU exchanges the layers and optimizers share: a host copy of a tensor, device
// scalars read back, and device scratch for the GPU reductions. Free of CUDA types; on a
// CPU-only build the GPU paths are never taken (no tensor is on a GPU).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/tensor/tensor.h"

namespace paralab::gpu {

// `t` itself when it is in host memory, else a host copy (waits for t's queue).
Tensor on_host(const Tensor& t);
// A tensor shaped like `t` on `device` (a copy; `t` itself when it already lives there).
Tensor on_device(const Tensor& t, Device& device, MemCategory category);

// Device doubles: `count` of them for results, plus the scratch a reduction of
// kernels/gpu/reduce.h needs after them (kReduceScratch doubles), on `device` (workspace).
struct DeviceDoubles {
    Tensor storage;
    double* result(int64_t i = 0) const { return static_cast<double*>(storage.raw()) + i; }
    double* scratch() const;
};
DeviceDoubles device_doubles(Device& device, int64_t count);

// Reads `count` device doubles back to the host (waits for `queue`).
std::vector<double> read_doubles(const double* device_values, int64_t count, void* queue);
inline double read_double(const double* device_value, void* queue) {
    return read_doubles(device_value, 1, queue)[0];
}

// `count` elements of `dtype` from host memory into a new workspace tensor on `device`, ordered
// on its queue (the host memory may change once this returns).
Tensor upload(const void* host, int64_t count, DType dtype, Device& device);
template <class T>
Tensor upload(const std::vector<T>& values, Device& device) {
    return upload(values.data(), static_cast<int64_t>(values.size()), dtype_of<T>(), device);
}
// Int64 values uploaded to `device` (a workspace tensor of f64 extent holding them).
Tensor upload_ids(const std::vector<int64_t>& ids, Device& device);
// The same written in place into `staged` (made `shape`d on `device` when undefined, an
// activation; ShapeError naming `who` when it holds another shape): a buffer a recorded GPU
// graph reads, refilled before each replay. `ids` holds shape.numel() values.
void upload_ids_into(const std::vector<int64_t>& ids, const Shape& shape, Device& device, Tensor& staged,
                     const std::string& who);

}  // namespace paralab::gpu
