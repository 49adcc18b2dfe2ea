#include "engine/strategy/sharded_units.h"

#include <algorithm>

#include "engine/nn/ops.h"
#include "engine/strategy/replicas.h"

namespace paralab::strategy {

ShardedUnits::ShardedUnits(std::vector<std::vector<Shape>> units, int index, int group, Options options)
    : m_index(index), m_group(group), m_options(options) {
    for (auto& shapes : units) {
        Unit u{std::move(shapes), 0};
        for (const Shape& s : u.shapes) u.numel += s.numel();
        m_units.push_back(std::move(u));
    }
    m_at.assign(static_cast<size_t>(group), std::vector<int64_t>(m_units.size()));
    m_shard_numel.assign(static_cast<size_t>(group), 0);
    for (int q = 0; q < group; ++q)
        for (size_t u = 0; u < m_units.size(); ++u) {
            m_at[static_cast<size_t>(q)][u] = m_shard_numel[static_cast<size_t>(q)];
            m_shard_numel[static_cast<size_t>(q)] += chunk(u, q).count;
        }
}

ShardedUnits::~ShardedUnits() { stop(); }

void ShardedUnits::start(Rank& rank, std::vector<std::vector<std::vector<nn::Param*>>> views,
                         comm::Communicator* gather) {
    PARALAB_CHECK(views.size() == m_units.size(), "zero stage 3: one list of views per unit");
    m_views = std::move(views);
    // The shard: this rank's chunk of each unit, unit after unit, copied from the whole
    // parameters, which then go. (A rank with no chunk at all keeps one unused zero, so that its
    // tensors exist.)
    Tensor shard = Tensor::zeros(Shape{std::max<int64_t>(shard_numel(m_index), 1)}, DType::f32, rank.device(),
                                 MemCategory::parameters);
    for (size_t u = 0; u < m_units.size(); ++u) {
        const auto c = chunk(u, m_index);
        Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, rank.device(), MemCategory::workspace);
        pack_values(m_views[u].front(), whole.data<float>());
        copy_floats(shard.data<float>() + at(u, m_index), whole.data<float>() + c.offset, c.count, whole.queue());
        rank.device().finish_queued();
    }
    for (auto& lists : m_views)
        for (auto& list : lists)
            for (nn::Param* p : list) {
                p->value = Tensor();
                p->grad = Tensor();
            }
    m_gathered.assign(m_units.size(), Tensor());
    m_grads.assign(m_units.size(), Tensor());
    m_ready.assign(m_units.size(), false);
    m_shard.name = "zero3_shard";
    m_shard.value = shard;
    m_shard.grad = Tensor::zeros(shard.shape(), DType::f32, rank.device(), MemCategory::gradients);
    if (m_options.prefetch && gather) {
        m_threaded = true;
        m_thread = std::thread([this, &rank, gather] { gather_loop(rank, *gather); });
    }
}

void ShardedUnits::interrupt() {
    std::lock_guard lock(m_mutex);
    m_stop = true;
    m_cv.notify_all();
}

void ShardedUnits::stop() {
    interrupt();
    if (m_thread.joinable()) m_thread.join();
}

void ShardedUnits::set_values(size_t u, const Tensor& whole) {
    for (auto& list : m_views[u]) {
        int64_t from = 0;
        for (size_t i = 0; i < list.size(); ++i) {
            list[i]->value = whole.view(from, m_units[u].shapes[i]);
            from += m_units[u].shapes[i].numel();
        }
    }
}

// Issues unit u's all-gather (once until it is released): on the prefetch thread, else here.
void ShardedUnits::gather(Rank& rank, comm::Communicator& group, size_t u) {
    if (u == kNone || m_gathered[u].defined()) return;
    const auto c = chunk(u, m_index);
    Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, rank.device(), MemCategory::parameters);
    copy_floats(whole.data<float>() + c.offset, m_shard.value.data<float>() + at(u, m_index), c.count, whole.queue());
    m_gathered[u] = whole;
    if (!m_threaded) {
        rank.record_comm(named(group.all_gather(whole.raw(), m_units[u].numel, DType::f32), m_options.gather_op));
        m_ready[u] = true;
        return;
    }
    rank.device().finish_queued();  // the own chunk is in place before another thread sends it
    std::lock_guard lock(m_mutex);
    m_queue.push_back({u, whole.data<float>()});
    m_cv.notify_all();
}

// Unit u's gather is done (waiting for the prefetch thread if need be): its parameters become
// views of the gathered buffer.
void ShardedUnits::use(Rank& rank, size_t u) {
    if (u == kNone) return;
    if (m_threaded) {
        std::unique_lock lock(m_mutex);
        if (!m_ready[u] && !m_error && !m_stop) {
            const auto t0 = Clock::now();
            m_cv.wait(lock, [&] { return m_ready[u] || m_error || m_stop; });
            lock.unlock();
            rank.record_idle("wait_all_gather", t0, Clock::now());
            lock.lock();
        }
        if (m_error) std::rethrow_exception(m_error);
        if (!m_ready[u]) throw comm::CommAborted("the run was aborted");
    }
    set_values(u, m_gathered[u]);
}

void ShardedUnits::release(size_t u) {
    for (auto& list : m_views[u])
        for (nn::Param* p : list) p->value = Tensor();
    m_gathered[u] = Tensor();
    std::lock_guard lock(m_mutex);
    m_ready[u] = false;
}

void ShardedUnits::gather_loop(Rank& rank, comm::Communicator& comm) {
    for (;;) {
        Queued q{};
        {
            std::unique_lock lock(m_mutex);
            m_cv.wait(lock, [&] { return m_stop || !m_queue.empty(); });
            if (m_stop) return;
            q = m_queue.front();
            m_queue.pop_front();
        }
        try {
            rank.record_async_comm(named(comm.all_gather(q.data, m_units[q.unit].numel, DType::f32), m_options.gather_op));
        } catch (...) {
            std::lock_guard lock(m_mutex);
            m_error = std::current_exception();
            m_cv.notify_all();
            return;
        }
        std::lock_guard lock(m_mutex);
        m_ready[q.unit] = true;
        m_cv.notify_all();
    }
}

void ShardedUnits::before_forward(Rank& rank, comm::Communicator& group, size_t u, size_t next) {
    gather(rank, group, u);
    if (m_options.prefetch) gather(rank, group, next);
    use(rank, u);
}

void ShardedUnits::after_forward(size_t u) {
    if (u != kNone && m_options.reshard_after_forward) release(u);
}

void ShardedUnits::before_backward(Rank& rank, comm::Communicator& group, size_t u, size_t previous) {
    gather(rank, group, u);
    if (m_options.prefetch) gather(rank, group, previous);
    use(rank, u);
    if (u == kNone) return;
    m_grads[u] = Tensor::zeros(Shape{m_units[u].numel}, DType::f32, rank.device(), MemCategory::gradients);
    for (auto& list : m_views[u]) {
        int64_t from = 0;
        for (size_t i = 0; i < list.size(); ++i) {
            list[i]->grad = m_grads[u].view(from, m_units[u].shapes[i]);
            from += m_units[u].shapes[i].numel();
        }
    }
}

// The unit's gradients are final: each rank receives the sum of its chunk, added to its shard
// gradient; the unit's gradients and parameters go.
void ShardedUnits::after_backward(Rank& rank, comm::Communicator& group, size_t u) {
    if (u == kNone) return;
    Tensor& g = m_grads[u];
    rank.record_comm(named(group.reduce_scatter(g.raw(), m_units[u].numel, DType::f32, comm::ReduceOp::sum),
                           m_options.scatter_op));
    const auto c = chunk(u, m_index);
    float* own = m_shard.grad.data<float>() + at(u, m_index);
    if (c.count > 0) nn::ops_for(g).add<float>(c.count, own, g.data<float>() + c.offset, own);
    for (auto& list : m_views[u])
        for (nn::Param* p : list) p->grad = Tensor();
    g = Tensor();
    release(u);
}

Tensor ShardedUnits::assemble(size_t u, const std::vector<Tensor>& shards, Device& device, MemCategory category) const {
    Tensor whole = Tensor::empty(Shape{m_units[u].numel}, DType::f32, device, category);
    for (int q = 0; q < m_group; ++q) {
        const auto c = chunk(u, q);
        if (c.count == 0) continue;
        whole.view(c.offset, Shape{c.count}).copy_from(shards[static_cast<size_t>(q)].view(at(u, q), Shape{c.count}));
    }
    return whole;
}

Tensor ShardedUnits::shard_of(const std::vector<std::vector<Tensor>>& whole, int q) const {
    Device& host = detached_host_device();
    Tensor mine = Tensor::zeros(Shape{std::max<int64_t>(shard_numel(q), 1)}, DType::f32, host, MemCategory::workspace);
    for (size_t u = 0; u < m_units.size(); ++u) {
        const auto c = chunk(u, q);
        if (c.count == 0) continue;
        Tensor flat = Tensor::empty(Shape{m_units[u].numel}, DType::f32, host, MemCategory::workspace);
        int64_t from = 0;
        for (const Tensor& t : whole[u]) {
            flat.view(from, t.shape()).copy_from(t);
            from += t.numel();
        }
        mine.view(at(u, q), Shape{c.count}).copy_from(flat.view(c.offset, Shape{c.count}));
    }
    return mine;
}

}  // namespace paralab::strategy
