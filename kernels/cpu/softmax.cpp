#include <kernels/cpu/softmax.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace paralab::kernels::cpu {

namespace {
// Rows are independent; parallel only when the matrix is large (a language model's
// [batch * time, vocab] logits), where the exp pass dominates.
constexpr int64_t kParallelMin = int64_t{1} << 15;
}  // namespace

// logits: [rows, classes], targets: [rows] -> probs: [rows, classes], returns the loss sum
template <class T>
double softmax_cross_entropy_forward(int64_t rows, int64_t classes, const T* logits,
                                     const int64_t* targets, T* probs) {
    // Per-row losses are summed afterwards in row order, so the total does not depend on
    // how threads split the rows.
    std::vector<double> row_loss(static_cast<size_t>(rows));
#pragma omp parallel for if (rows * classes >= kParallelMin && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
        const T* z = logits + r * classes;
        T* p = probs + r * classes;
        const T max = *std::max_element(z, z + classes);
        double sum = 0;
        for (int64_t c = 0; c < classes; ++c) {
            p[c] = std::exp(z[c] - max);
            sum += static_cast<double>(p[c]);
        }
        const double inv = 1.0 / sum;
        for (int64_t c = 0; c < classes; ++c) p[c] = static_cast<T>(p[c] * inv);
        // -log softmax = log(sum exp(z - max)) - (z_t - max): every term is bounded.
        row_loss[static_cast<size_t>(r)] =
            std::log(sum) - (static_cast<double>(z[targets[r]]) - static_cast<double>(max));
    }
    double total = 0;
    for (double l : row_loss) total += l;
    return total;
}

// probs: [rows, classes], targets: [rows] -> dlogits: [rows, classes]
template <class T>
void softmax_cross_entropy_backward(int64_t rows, int64_t classes, const T* probs,
                                    const int64_t* targets, T scale, T* dlogits) {
#pragma omp parallel for if (rows * classes >= kParallelMin && rows > 1)
    for (int64_t r = 0; r < rows; ++r) {
        const T* p = probs + r * classes;
        T* d = dlogits + r * classes;
#pragma omp simd
        for (int64_t c = 0; c < classes; ++c) d[c] = scale * p[c];
        d[targets[r]] -= scale;
    }
}

// x: [rows, cols] -> out: [rows]
template <class T>
void argmax_rows(int64_t rows, int64_t cols, const T* x, int64_t* out) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * cols;
        out[r] = std::max_element(row, row + cols) - row;  // first of equal maxima
    }
}

#define PARALAB_INSTANTIATE_SOFTMAX(T)                                                             \
    template double softmax_cross_entropy_forward<T>(int64_t, int64_t, const T*, const int64_t*,   \
                                                     T*);                                          \
    template void softmax_cross_entropy_backward<T>(int64_t, int64_t, const T*, const int64_t*, T, \
                                                    T*);                                           \
    template void argmax_rows<T>(int64_t, int64_t, const T*, int64_t*);

PARALAB_INSTANTIATE_SOFTMAX(float)
PARALAB_INSTANTIATE_SOFTMAX(double)
#undef PARALAB_INSTANTIATE_SOFTMAX

}  // namespace paralab::kernels::cpu
