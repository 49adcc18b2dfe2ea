#include <kernels/cpu/dnnl_conv.h>

#include <stdexcept>
#include <string>
#include <unordered_map>

#ifdef PARALAB_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace paralab::kernels::cpu {

namespace {
std::string describe(const Conv2dGeometry& g, int64_t batch, int64_t out_channels) {
    return "conv2d [" + std::to_string(batch) + ", " + std::to_string(g.channels) + ", " +
           std::to_string(g.height) + ", " + std::to_string(g.width) + "] -> " +
           std::to_string(out_channels) + " channels, kernel " + std::to_string(g.kernel) +
           ", stride " + std::to_string(g.stride) + ", padding " + std::to_string(g.padding);
}
}  // namespace

#ifdef PARALAB_HAVE_DNNL

bool dnnl_conv_available() { return true; }

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

const dnnl::engine& cpu_engine() {
    static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

// A stream per thread: a stream is not shared between threads, and on the CPU it only names
// the thread that runs the primitives (on its OpenMP team).
dnnl::stream& thread_stream() {
    thread_local dnnl::stream stream(cpu_engine());
    return stream;
}

constexpr size_t kAlign = 64;
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// One buffer of a pass's workspace: where it starts, or none when the operand is used in place.
struct Slot {
    size_t offset = 0;
    bool used = false;
};

// Lays out a pass's workspace: each add() returns the slot's place after the previous ones.
struct Layout {
    size_t bytes = 0;
    Slot add(size_t size) {
        Slot s{bytes, true};
        bytes += aligned(size);
        return s;
    }
};

// An operand as the primitive wants it: the caller's buffer when oneDNN takes the plain
// layout, else a slot of the workspace and a reorder between the two.
struct Operand {
    memory::desc plain, internal;
    Slot slot;
    dnnl::reorder to_internal, to_plain;  // made only where needed

    void init(const memory::desc& user, const memory::desc& want, Layout& layout, bool in,
              bool out) {
        plain = user;
        internal = want;
        if (plain == internal) return;
        slot = layout.add(internal.get_size());
        const auto& e = cpu_engine();
        if (in) to_internal = dnnl::reorder(dnnl::reorder::primitive_desc(e, plain, e, internal));
        if (out) to_plain = dnnl::reorder(dnnl::reorder::primitive_desc(e, internal, e, plain));
    }
    bool in_place() const { return !slot.used; }
    // The operand's memory for the primitive: the caller's, reordered into the workspace first
    // when `load` and the layouts differ.
    memory bind(const void* user, char* ws, bool load, dnnl::stream& s) const {
        const auto& e = cpu_engine();
        memory user_mem(plain, e, const_cast<void*>(user));
        if (in_place()) return user_mem;
        memory mem(internal, e, ws + slot.offset);
        if (load) to_internal.execute(s, user_mem, mem);
        return mem;
    }
    void store(memory mem, void* user, dnnl::stream& s) const {
        if (in_place()) return;
        memory user_mem(plain, cpu_engine(), user);
        to_plain.execute(s, mem, user_mem);
    }
};
}  // namespace

struct DnnlConv2dPlan::Impl {
    int64_t batch = 0, out_channels = 0, weight_size = 0;
    bool bias = false;

    dnnl::convolution_forward fwd;
    dnnl::convolution_backward_data bwd_data;
    dnnl::convolution_backward_weights bwd_weights;

    Layout fwd_layout, bwd_layout;
    // forward
    Operand f_src, f_weights, f_dst;
    Slot f_scratch;
    memory::desc f_scratch_md, bias_md;
    // backward data
    Operand d_diff_dst, d_weights, d_diff_src;
    Slot d_scratch;
    memory::desc d_scratch_md;
    // backward weights
    Operand w_src, w_diff_dst, w_diff_weights;
    // Backward weights reads dy in the layout backward data already reordered it into: the
    // one reorder serves both when dx is computed.
    bool diff_dst_shared = false;
    Slot w_plain_dw, w_db, w_scratch;
    memory::desc w_scratch_md;
};

DnnlConv2dPlan::DnnlConv2dPlan(const Conv2dGeometry& g, int64_t batch, int64_t out_channels,
                               bool bias)
    : m_impl(std::make_unique<Impl>()) {
    Impl& p = *m_impl;
    p.batch = batch;
    p.out_channels = out_channels;
    p.bias = bias;
    p.weight_size = out_channels * g.channels * g.kernel * g.kernel;
    try {
        const memory::dims src_dims{batch, g.channels, g.height, g.width};
        const memory::dims w_dims{out_channels, g.channels, g.kernel, g.kernel};
        const memory::dims dst_dims{batch, out_channels, g.out_height(), g.out_width()};
        const memory::dims strides{g.stride, g.stride}, pad{g.padding, g.padding};
        const memory::desc src_plain(src_dims, dt::f32, tag::nchw);
        const memory::desc w_plain(w_dims, dt::f32, tag::oihw);
        const memory::desc dst_plain(dst_dims, dt::f32, tag::nchw);
        const memory::desc src_any(src_dims, dt::f32, tag::any);
        const memory::desc w_any(w_dims, dt::f32, tag::any);
        const memory::desc dst_any(dst_dims, dt::f32, tag::any);
        p.bias_md = bias ? memory::desc({out_channels}, dt::f32, tag::x) : memory::desc();

        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        const auto& e = cpu_engine();
        const auto algo = dnnl::algorithm::convolution_direct;

        const dnnl::convolution_forward::primitive_desc fpd(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, src_any,
                                            w_any, p.bias_md, dst_any, strides, pad, pad),
            attr, e);
        const dnnl::convolution_backward_data::primitive_desc dpd(
            dnnl::convolution_backward_data::desc(algo, src_any, w_any, dst_any, strides, pad, pad),
            attr, e, fpd);
        const dnnl::convolution_backward_weights::primitive_desc wpd(
            dnnl::convolution_backward_weights::desc(algo, src_any, w_any, p.bias_md, dst_any,
                                                     strides, pad, pad),
            attr, e, fpd);
        p.fwd = dnnl::convolution_forward(fpd);
        p.bwd_data = dnnl::convolution_backward_data(dpd);
        p.bwd_weights = dnnl::convolution_backward_weights(wpd);

        p.f_src.init(src_plain, fpd.src_desc(), p.fwd_layout, true, false);
        p.f_weights.init(w_plain, fpd.weights_desc(), p.fwd_layout, true, false);
        p.f_dst.init(dst_plain, fpd.dst_desc(), p.fwd_layout, false, true);
        p.f_scratch_md = fpd.scratchpad_desc();
        p.f_scratch = p.fwd_layout.add(p.f_scratch_md.get_size());

        p.d_diff_dst.init(dst_plain, dpd.diff_dst_desc(), p.bwd_layout, true, false);
        p.d_weights.init(w_plain, dpd.weights_desc(), p.bwd_layout, true, false);
        p.d_diff_src.init(src_plain, dpd.diff_src_desc(), p.bwd_layout, false, true);
        p.d_scratch_md = dpd.scratchpad_desc();
        p.d_scratch = p.bwd_layout.add(p.d_scratch_md.get_size());

        p.w_src.init(src_plain, wpd.src_desc(), p.bwd_layout, true, false);
        p.diff_dst_shared = !p.d_diff_dst.in_place() && wpd.diff_dst_desc() == p.d_diff_dst.internal;
        if (p.diff_dst_shared) p.w_diff_dst = p.d_diff_dst;  // same slot, same reorder
        else p.w_diff_dst.init(dst_plain, wpd.diff_dst_desc(), p.bwd_layout, true, false);
        p.w_diff_weights.init(w_plain, wpd.diff_weights_desc(), p.bwd_layout, false, true);
        p.w_plain_dw = p.bwd_layout.add(w_plain.get_size());
        if (bias) p.w_db = p.bwd_layout.add(p.bias_md.get_size());
        p.w_scratch_md = wpd.scratchpad_desc();
        p.w_scratch = p.bwd_layout.add(p.w_scratch_md.get_size());
    } catch (const dnnl::error& err) {
        throw std::runtime_error("oneDNN has no convolution for " +
                                 describe(g, batch, out_channels) + ": " + err.what());
    }
}

DnnlConv2dPlan::~DnnlConv2dPlan() = default;

int64_t DnnlConv2dPlan::batch() const { return m_impl->batch; }
size_t DnnlConv2dPlan::forward_workspace_bytes() const { return m_impl->fwd_layout.bytes; }
size_t DnnlConv2dPlan::backward_workspace_bytes() const { return m_impl->bwd_layout.bytes; }

void DnnlConv2dPlan::forward(const float* x, const float* w, const float* b, float* y,
                             void* workspace) const {
    const Impl& p = *m_impl;
    auto& s = thread_stream();
    char* ws = static_cast<char*>(workspace);
    const auto& e = cpu_engine();
    memory src = p.f_src.bind(x, ws, true, s);
    memory weights = p.f_weights.bind(w, ws, true, s);
    memory dst = p.f_dst.bind(y, ws, false, s);
    memory scratch(p.f_scratch_md, e, ws + p.f_scratch.offset);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                         {DNNL_ARG_WEIGHTS, weights},
                                         {DNNL_ARG_DST, dst},
                                         {DNNL_ARG_SCRATCHPAD, scratch}};
    if (p.bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias_md, e, const_cast<float*>(b)));
    p.fwd.execute(s, args);
    p.f_dst.store(dst, y, s);
    s.wait();
}

void DnnlConv2dPlan::backward(const float* x, const float* dy, const float* w, float* dx,
                              float* dw_acc, float* db_acc, void* workspace) const {
    const Impl& p = *m_impl;
    auto& s = thread_stream();
    char* ws = static_cast<char*>(workspace);
    const auto& e = cpu_engine();
    if (dx) {
        memory diff_dst = p.d_diff_dst.bind(dy, ws, true, s);
        memory weights = p.d_weights.bind(w, ws, true, s);
        memory diff_src = p.d_diff_src.bind(dx, ws, false, s);
        p.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst},
                               {DNNL_ARG_WEIGHTS, weights},
                               {DNNL_ARG_DIFF_SRC, diff_src},
                               {DNNL_ARG_SCRATCHPAD, memory(p.d_scratch_md, e, ws + p.d_scratch.offset)}});
        p.d_diff_src.store(diff_src, dx, s);
    }
    float* dw_plain = reinterpret_cast<float*>(ws + p.w_plain_dw.offset);
    float* db = p.bias ? reinterpret_cast<float*>(ws + p.w_db.offset) : nullptr;
    memory src = p.w_src.bind(x, ws, true, s);
    // dy is already in the shared slot when backward data ran
    memory diff_dst = p.w_diff_dst.bind(dy, ws, !(dx && p.diff_dst_shared), s);
    memory diff_weights = p.w_diff_weights.bind(dw_plain, ws, false, s);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src},
                                         {DNNL_ARG_DIFF_DST, diff_dst},
                                         {DNNL_ARG_DIFF_WEIGHTS, diff_weights},
                                         {DNNL_ARG_SCRATCHPAD, memory(p.w_scratch_md, e, ws + p.w_scratch.offset)}};
    if (p.bias) args.emplace(DNNL_ARG_DIFF_BIAS, memory(p.bias_md, e, db));
    p.bwd_weights.execute(s, args);
    p.w_diff_weights.store(diff_weights, dw_plain, s);
    s.wait();
    for (int64_t i = 0; i < p.weight_size; ++i) dw_acc[i] += dw_plain[i];
    if (p.bias)
        for (int64_t i = 0; i < p.out_channels; ++i) db_acc[i] += db[i];
}

#else  // no oneDNN in this build

bool dnnl_conv_available() { return false; }

struct DnnlConv2dPlan::Impl {};

// No plan can be made without oneDNN (the constructor throws), so these never run.

DnnlConv2dPlan::DnnlConv2dPlan(const Conv2dGeometry& g, int64_t batch, int64_t out_channels, bool) {
    throw std::runtime_error("this build has no oneDNN for " + describe(g, batch, out_channels));
}
DnnlConv2dPlan::~DnnlConv2dPlan() = default;
int64_t DnnlConv2dPlan::batch() const { return 0; }
size_t DnnlConv2dPlan::forward_workspace_bytes() const { return 0; }
size_t DnnlConv2dPlan::backward_workspace_bytes() const { return 0; }
void DnnlConv2dPlan::forward(const float*, const float*, const float*, float*, void*) const {}
void DnnlConv2dPlan::backward(const float*, const float*, const float*, float*, float*, float*,
                              void*) const {}

#endif

}  // namespace paralab::kernels::cpu
