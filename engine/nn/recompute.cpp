#include "engine/nn/recompute.h"

#include "engine/util/error.h"

namespace paralab::nn {

namespace {
thread_local RecomputeListener t_listener;
thread_local bool t_recomputing = false;
}  // namespace

Recompute recompute_from_name(const std::string& name) {
    if (name == "none") return Recompute::none;
    if (name == "selective") return Recompute::selective;
    if (name == "full") return Recompute::full;
    throw ConfigError("train.recompute", "expected one of none, selective, full, got \"" + name + "\"");
}

void set_recompute_listener(RecomputeListener listener) { t_listener = std::move(listener); }

bool recomputing() { return t_recomputing; }

RecomputeScope::RecomputeScope() : m_begin(std::chrono::steady_clock::now()), m_outer(!t_recomputing) {
    t_recomputing = true;
}

RecomputeScope::~RecomputeScope() {
    if (!m_outer) return;  // a selective recompute inside a full one is one interval
    t_recomputing = false;
    if (t_listener) t_listener(m_begin, std::chrono::steady_clock::now());
}

}  // namespace paralab::nn
