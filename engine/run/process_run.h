// The parts of a run across the processes of an MPI job (trainer.h, JobOptions) that are not
// the training loop: rank 0 hears every other process's records, heartbeats, end and failure
// over MpiGroup's byte messages, and the trained model is put together on rank 0 from every
// process's part. Internal to engine/run.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/communicator.h"
#include "engine/comm/mpi.h"
#include "engine/nn/model.h"
#include "engine/run/metrics_bus.h"
#include "engine/run/trainer.h"

namespace paralab::run::job {

// One rank's published step, as it travels to rank 0.
struct Published {
    std::vector<config::Span> spans;
    config::StepRecord record;
    double loss_sum = 0;
    int64_t loss_samples = 0;
};

// What a process tells rank 0 (one JSON object per message; encode/decode are exact for the
// doubles they carry).
struct Message {
    enum class Kind { records, heartbeat, end, failure } kind = Kind::heartbeat;
    std::vector<Published> records;  // records
    std::map<std::string, MemoryStats> memory;  // end: each device's memory at the end of training
    std::string reason;              // failure
};
std::string encode(const Message& m);
Message decode(const std::string& bytes);

// A process other than rank 0: forwards its published steps in batches (at least every
// `flush_s`), and a heartbeat every `heartbeat_s` from a thread of its own. That thread also
// hears rank 0's heartbeat (RootHeartbeat): when rank 0 has not been heard from for
// `rank_timeout_s` (its process hung, or died without mpirun noticing), it calls
// `on_root_silent` with how long, which ends the job.
class Sender {
public:
    Sender(comm::MpiGroup& mpi, double rank_timeout_s, std::function<void(double silent_s)> on_root_silent,
           double flush_s = 0.1, double heartbeat_s = 0.25);
    ~Sender();  // stops the heartbeat
    void publish(Published p);  // rank thread
    void flush();
    void end(const std::map<std::string, MemoryStats>& memory);  // after training: flushes, then says so
    void fail(const std::string& reason);      // flushes what it can, then says why

private:
    void send(const Message& m);
    comm::MpiGroup& m_mpi;
    const double m_flush_s, m_heartbeat_s;
    std::mutex m_mutex;  // one send at a time, and the batch
    std::vector<Published> m_batch;
    std::chrono::steady_clock::time_point m_last_flush;
    std::atomic<bool> m_stop{false};
    std::mutex m_wake_mutex;
    std::condition_variable m_wake;
    const double m_rank_timeout_s;
    std::function<void(double)> m_on_root_silent;
    std::thread m_heartbeat;
};

// Rank 0: a heartbeat to every other process every `heartbeat_s` from a thread of its own, for
// as long as it lives, so that they can end the job when rank 0 hangs.
class RootHeartbeat {
public:
    explicit RootHeartbeat(comm::MpiGroup& mpi, double heartbeat_s = 0.25);
    ~RootHeartbeat();

private:
    comm::MpiGroup& m_mpi;
    std::atomic<bool> m_stop{false};
    std::mutex m_wake_mutex;
    std::condition_variable m_wake;
    std::thread m_thread;
};

// Rank 0: hears every other process until each has ended (or the receiver is stopped), hands
// their steps to the bus, and keeps when each was last heard from.
class Receiver {
public:
    using FailureHandler = std::function<void(int rank, const std::string& reason)>;
    Receiver(comm::MpiGroup& mpi, MetricsBus& bus, FailureHandler on_failure);
    ~Receiver();  // stops

    // True once every other process has ended within `timeout_s`.
    bool wait_ended(double timeout_s);
    void stop();
    // The other process heard from least recently (-1 when there is none), and how long ago.
    int least_recent(double& silent_s) const;
    // Memory at the end of training per device, for the processes that ended.
    std::map<std::string, MemoryStats> end_memory() const;

private:
    void loop();
    comm::MpiGroup& m_mpi;
    MetricsBus& m_bus;
    FailureHandler m_on_failure;
    mutable std::mutex m_mutex;
    std::condition_variable m_changed;
    std::vector<std::chrono::steady_clock::time_point> m_last_heard;  // by rank
    std::vector<bool> m_ended;
    std::map<std::string, MemoryStats> m_memory;
    std::atomic<bool> m_stop{false};
    std::thread m_thread;
};

// Collective over `comm` (one rank per process): every process offers what it holds of the
// trained model (strategy::Strategy::parameters() and buffers(): empty tensors for the parts
// it does not hold) and rank `comm`'s 0 copies every part into `model`'s parameters and buffers
// (its own directly, the others' as messages). Throws on rank 0 when some part is held by no
// process.
void gather_model(comm::Communicator& comm, const std::vector<Tensor>& params,
                  const std::vector<Tensor>& buffers, nn::Model* model);

}  // namespace paralab::run::job
