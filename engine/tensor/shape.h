// A tensor shape: a short list of non-negative extents, row-major.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/util/error.h"

namespace paralab {

class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims) : m_dims(dims) {}
    explicit Shape(std::vector<int64_t> dims) : m_dims(std::move(dims)) {}

    size_t rank() const { return m_dims.size(); }
    int64_t operator[](size_t i) const { return m_dims[i]; }
    int64_t& operator[](size_t i) { return m_dims[i]; }
    const std::vector<int64_t>& dims() const { return m_dims; }
    int64_t back() const { return m_dims.back(); }

    // The element count; throws ShapeError when it does not fit in int64 (a model of absurd
    // sizes), never wraps.
    int64_t numel() const {
        int64_t n = 1;
        for (int64_t d : m_dims)
            if (__builtin_mul_overflow(n, d, &n)) overflow();
        return n;
    }

    // The shape with `batch` prepended: per-sample shape [C,H,W] -> [B,C,H,W].
    Shape with_batch(int64_t batch) const {
        std::vector<int64_t> d;
        d.reserve(m_dims.size() + 1);
        d.push_back(batch);
        d.insert(d.end(), m_dims.begin(), m_dims.end());
        return Shape(std::move(d));
    }

    // The shape without its first extent: [B,C,H,W] -> [C,H,W].
    Shape drop_first() const {
        return m_dims.empty() ? Shape() : Shape(std::vector<int64_t>(m_dims.begin() + 1, m_dims.end()));
    }

    // "[1, 28, 28]"
    std::string to_string() const {
        std::string s = "[";
        for (size_t i = 0; i < m_dims.size(); ++i) {
            if (i) s += ", ";
            s += std::to_string(m_dims[i]);
        }
        return s + "]";
    }

    bool operator==(const Shape&) const = default;

private:
    [[noreturn]] void overflow() const {
        throw ShapeError("the shape " + to_string() + " has more elements than a 64-bit count holds");
    }

    std::vector<int64_t> m_dims;
};

}  // namespace paralab
