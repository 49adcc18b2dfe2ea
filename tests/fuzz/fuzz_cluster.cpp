// The cluster file (engine/plan/cluster.h) through the entry `paralab plan --cluster FILE` uses:
// load_cluster. An accepted cluster is within the planner's bounds (docs/planner.md, "Bounds").
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "engine/plan/cluster.h"
#include "engine/util/error.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const paralab::fuzz::InputFile file(data, size);
    paralab::plan::Cluster c;
    try {
        c = paralab::plan::load_cluster(file.path());
    } catch (const paralab::Error&) {
        return 0;
    }
    if (int64_t{c.nodes} * c.gpus_per_node > paralab::plan::kMaxClusterDevices) std::abort();
    if (!(c.peak_flops_16bit > 0 && c.memory_bandwidth > 0 && c.intra_bandwidth > 0 && c.inter_bandwidth > 0))
        std::abort();
    return 0;
}
