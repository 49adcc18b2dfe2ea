#include "engine/nn/recompute.h"

#include "engine/util/error.h"

namespace paralab::nn {

namespace {
thread_local RecomputeListener t_listener;
thread_local bool t_recomputing = false;
}  // namespace

const char* recompute_name(Recompute r) {
    switch (r) {
        case Recompute::none:
            return "none";
        case Recompute::selective:
            return "selective";
        case Recompute::full:
            return "full";
    }
    return "?";
}

Recompute recompute_from_name(const std::string& name, const std::string& key) {
    for (const auto r : {Recompute::none, Recompute::selective, Recompute::full})
        if (name == recompute_name(r)) return r;
    throw ConfigError(key, "expected one of none, selective, full, got \"" + name + "\"");
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
