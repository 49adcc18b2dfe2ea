#include "engine/plan/collectives.h"

namespace paralab::plan {

Link link_of(const Cluster& c, int size, int stride) {
    const int64_t span = static_cast<int64_t>(size - 1) * stride + 1;
    if (span <= c.gpus_per_node) return {c.intra_latency, c.intra_bandwidth};
    return {c.inter_latency, c.inter_bandwidth};
}

double all_reduce_s(double bytes, int n, const Link& l) {
    if (n <= 1 || bytes <= 0) return 0;
    return 2.0 * (n - 1) * (l.latency + bytes / n / l.bandwidth);
}

double all_gather_s(double bytes, int n, const Link& l) {
    if (n <= 1 || bytes <= 0) return 0;
    return (n - 1) * (l.latency + bytes / n / l.bandwidth);
}

double reduce_scatter_s(double bytes, int n, const Link& l) {
    return all_gather_s(bytes, n, l);
}

double send_s(double bytes, const Link& l) {
    return bytes <= 0 ? 0 : l.latency + bytes / l.bandwidth;
}

}  // namespace paralab::plan
