// Collectives on the α–β model, per link level (docs/planner.md, "Collectives"): a message of n
// bytes costs α + n/β on its link; a ring collective is n−1 or 2(n−1) such steps.
#pragma once

#include "engine/plan/cluster.h"

namespace paralab::plan {

struct Link {
    double latency = 0;    // α, s per message
    double bandwidth = 0;  // β⁻¹, bytes/s per device and direction
};
// The link a group of `size` devices spaced `stride` apart (device indices) uses on `c`:
// NVLink when the group fits in one node, InfiniBand otherwise.
Link link_of(const Cluster& c, int size, int stride);
// Ring all-reduce of `bytes` over n devices: 2(n−1) steps of bytes/n.
double all_reduce_s(double bytes, int n, const Link& l);
// Ring all-gather or reduce-scatter (`bytes` = the whole gathered buffer): n−1 steps of bytes/n.
double all_gather_s(double bytes, int n, const Link& l);
double reduce_scatter_s(double bytes, int n, const Link& l);
double send_s(double bytes, const Link& l);

}  // namespace paralab::plan
