// run_experiment: a local run (local_run.cpp) or one process of an MPI job (job_run.cpp), on
// the core they share (training.h).
#include "engine/run/trainer.h"

#include "engine/run/training.h"

namespace paralab::run {

RunObserver::~RunObserver() = default;

config::RunSummary run_experiment(const config::Experiment& e, RunObserver* observer, RunControl* control,
                                  int compute_threads, RunArtifacts* artifacts, const JobOptions* job) {
    if (job) return detail::run_job(e, observer, control, compute_threads, artifacts, *job);
    return detail::run_local(e, observer, control, compute_threads, artifacts);
}

}  // namespace paralab::run
