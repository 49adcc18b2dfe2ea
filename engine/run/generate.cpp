#include "engine/run/generate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/gpu_values.h"
#include "engine/util/rng.h"

namespace paralab::run {

std::string generate_text(const std::function<Tensor(const Tensor&)>& predict, Device& device, int64_t T,
                          const GenerateOptions& o) {
    PARALAB_CHECK(T >= 1 && o.tokens >= 0 && o.temperature >= 0, "generate_text: bad context or options");
    std::vector<uint8_t> tokens(o.prompt.begin(), o.prompt.end());
    if (tokens.empty()) tokens.push_back('\n');
    Rng rng(o.seed);
    std::string out;
    Tensor host = Tensor::zeros(Shape{1, T}, DType::f32, detached_host_device(), MemCategory::workspace);
    Tensor x = Tensor::empty(Shape{1, T}, DType::f32, device, MemCategory::activations);
    std::vector<double> p;
    for (int64_t n = 0; n < o.tokens; ++n) {
        const size_t used = std::min(tokens.size(), static_cast<size_t>(T));
        float* ids = host.data<float>();
        std::fill(ids, ids + T, 0.0f);
        for (size_t k = 0; k < used; ++k) ids[k] = static_cast<float>(tokens[tokens.size() - used + k]);
        x.copy_from(host);
        const Tensor scores = gpu::on_host(predict(x));
        PARALAB_CHECK(scores.rank() == 3 && scores.dim(1) == T, "generate_text: the model gives " +
                                                                     scores.shape().to_string() + ", not [1, T, V]");
        const int64_t V = std::min<int64_t>(scores.dim(2), 256);
        std::vector<double> row(static_cast<size_t>(V));
        dispatch_float(scores.dtype(), [&]<class F>() {
            const F* s = scores.data<F>() + static_cast<int64_t>(used - 1) * scores.dim(2);
            for (int64_t v = 0; v < V; ++v) row[static_cast<size_t>(v)] = static_cast<double>(s[v]);
        });
        int64_t next = std::max_element(row.begin(), row.end()) - row.begin();
        if (o.temperature > 0) {
            const double max = row[static_cast<size_t>(next)];
            double sum = 0;
            for (double& v : row) sum += (v = std::exp((v - max) / o.temperature));
            double u = rng.uniform() * sum;
            for (int64_t v = 0; v < V; ++v) {
                u -= row[static_cast<size_t>(v)];
                if (u <= 0) {
                    next = v;
                    break;
                }
            }
        }
        tokens.push_back(static_cast<uint8_t>(next));
        out.push_back(static_cast<char>(next));
    }
    return out;
}

std::string printable_text(const std::string& text) {
    std::string out = text;
    for (char& c : out) {
        const auto u = static_cast<unsigned char>(c);
        if (!(u == '\n' || u == '\t' || (u >= 0x20 && u < 0x7f))) c = '?';
    }
    return out;
}

}  // namespace paralab::run
