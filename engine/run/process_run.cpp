#include "engine/run/process_run.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/device/device.h"
#include "engine/run/event_stream.h"

namespace paralab::run::job {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kTag = 7;  // MpiGroup byte messages of the run (its own communicator)
constexpr int kProgressTag = 8;  // never sent
constexpr int kRootTag = 9;      // rank 0's heartbeat to the other processes
// Tags of gather_model on the training communicator: above any pipeline message tag.
constexpr int kMaskTag = 30001, kTensorTag = 30002;

using stream::memory_from;
using stream::memory_json;
using stream::number_from;

json published_json(const Published& p) {
    json spans = json::array();
    for (const config::Span& s : p.spans) spans.push_back(stream::span_json(s));
    return json{{"record", stream::record_json(p.record)},
                {"loss_sum", stream::number_json(p.loss_sum)},
                {"loss_samples", p.loss_samples},
                {"spans", std::move(spans)}};
}

Published published_from(const json& j) {
    Published p;
    p.record = stream::record_from(j.at("record"));
    p.loss_sum = number_from(j.at("loss_sum"));
    p.loss_samples = j.at("loss_samples").get<int64_t>();
    for (const json& s : j.at("spans")) p.spans.push_back(stream::span_from(s));
    return p;
}

const char* kind_name(Message::Kind k) {
    switch (k) {
        case Message::Kind::records: return "records";
        case Message::Kind::heartbeat: return "heartbeat";
        case Message::Kind::end: return "end";
        case Message::Kind::failure: return "failure";
    }
    return "?";
}

}  // namespace

std::string encode(const Message& m) {
    json j{{"kind", kind_name(m.kind)}};
    if (m.kind == Message::Kind::records) {
        json items = json::array();
        for (const Published& p : m.records) items.push_back(published_json(p));
        j["records"] = std::move(items);
    }
    if (m.kind == Message::Kind::end) {
        json memory = json::object();
        for (const auto& [device, stats] : m.memory) memory[device] = memory_json(stats);
        j["memory"] = std::move(memory);
    }
    if (m.kind == Message::Kind::failure) j["reason"] = m.reason;
    return j.dump();
}

Message decode(const std::string& bytes) {
    const json j = json::parse(bytes);
    Message m;
    const std::string kind = j.at("kind").get<std::string>();
    if (kind == "records") {
        m.kind = Message::Kind::records;
        for (const json& p : j.at("records")) m.records.push_back(published_from(p));
    } else if (kind == "heartbeat") {
        m.kind = Message::Kind::heartbeat;
    } else if (kind == "end") {
        m.kind = Message::Kind::end;
        for (const auto& [device, stats] : j.at("memory").items()) m.memory[device] = memory_from(stats);
    } else if (kind == "failure") {
        m.kind = Message::Kind::failure;
        m.reason = j.at("reason").get<std::string>();
    } else {
        throw Error("a run message of unknown kind '" + kind + "'");
    }
    return m;
}

// ---- Sender ---------------------------------------------------------------------------------

Sender::Sender(comm::MpiGroup& mpi, double rank_timeout_s, std::function<void(double)> on_root_silent,
               double flush_s, double heartbeat_s)
    : m_mpi(mpi), m_flush_s(flush_s), m_heartbeat_s(heartbeat_s), m_last_flush(Clock::now()),
      m_rank_timeout_s(rank_timeout_s), m_on_root_silent(std::move(on_root_silent)) {
    m_heartbeat = std::thread([this] {
        Clock::time_point root_heard = Clock::now();
        std::unique_lock lock(m_wake_mutex);
        while (!m_stop.load()) {
            m_wake.wait_for(lock, std::chrono::duration<double>(m_heartbeat_s));
            if (m_stop.load()) break;
            lock.unlock();
            try {
                send(Message{});
                // Drive MPI's progress from this thread too: while the rank thread waits in a
                // collective for a peer that stopped, the messages queued to rank 0 must still
                // leave (nothing is ever sent with this tag).
                int source = 0;
                std::string none;
                m_mpi.try_recv_bytes(kProgressTag, source, none);
                std::string beat;
                while (m_mpi.try_recv_bytes(kRootTag, source, beat)) root_heard = Clock::now();
            } catch (const std::exception&) {
                // The job is ending; rank 0's watchdog decides what that means.
            }
            const double silent = std::chrono::duration<double>(Clock::now() - root_heard).count();
            if (silent > m_rank_timeout_s && m_on_root_silent) m_on_root_silent(silent);
            lock.lock();
        }
    });
}

RootHeartbeat::RootHeartbeat(comm::MpiGroup& mpi, double heartbeat_s) : m_mpi(mpi) {
    m_thread = std::thread([this, heartbeat_s] {
        std::unique_lock lock(m_wake_mutex);
        while (!m_stop.load()) {
            lock.unlock();
            try {
                for (int r = 1; r < m_mpi.size(); ++r) m_mpi.send_bytes(r, kRootTag, std::string());
            } catch (const std::exception&) {
                // The job is ending; each process's own watch decides what that means.
            }
            lock.lock();
            m_wake.wait_for(lock, std::chrono::duration<double>(heartbeat_s), [this] { return m_stop.load(); });
        }
    });
}

RootHeartbeat::~RootHeartbeat() {
    {
        std::lock_guard lock(m_wake_mutex);
        m_stop.store(true);
    }
    m_wake.notify_all();
    if (m_thread.joinable()) m_thread.join();
}

Sender::~Sender() {
    {
        std::lock_guard lock(m_wake_mutex);
        m_stop.store(true);
    }
    m_wake.notify_all();
    if (m_heartbeat.joinable()) m_heartbeat.join();
}

void Sender::send(const Message& m) {
    const std::string bytes = encode(m);
    std::lock_guard lock(m_mutex);
    m_mpi.send_bytes(0, kTag, bytes);
}

void Sender::publish(Published p) {
    std::vector<Published> batch;
    {
        std::lock_guard lock(m_mutex);
        m_batch.push_back(std::move(p));
        const double since = std::chrono::duration<double>(Clock::now() - m_last_flush).count();
        if (since < m_flush_s) return;
        batch.swap(m_batch);
        m_last_flush = Clock::now();
    }
    Message m;
    m.kind = Message::Kind::records;
    m.records = std::move(batch);
    send(m);
}

void Sender::flush() {
    Message m;
    m.kind = Message::Kind::records;
    {
        std::lock_guard lock(m_mutex);
        m.records.swap(m_batch);
        m_last_flush = Clock::now();
    }
    if (!m.records.empty()) send(m);
}

void Sender::end(const std::map<std::string, MemoryStats>& memory) {
    flush();
    Message m;
    m.kind = Message::Kind::end;
    m.memory = memory;
    send(m);
}

void Sender::fail(const std::string& reason) {
    try {
        flush();
    } catch (const std::exception&) {
    }
    Message m;
    m.kind = Message::Kind::failure;
    m.reason = reason;
    send(m);
}

// ---- Receiver -------------------------------------------------------------------------------

Receiver::Receiver(comm::MpiGroup& mpi, MetricsBus& bus, FailureHandler on_failure)
    : m_mpi(mpi), m_bus(bus), m_on_failure(std::move(on_failure)),
      m_last_heard(size_t(mpi.size()), Clock::now()), m_ended(size_t(mpi.size()), false) {
    m_ended[0] = true;  // rank 0 is this process
    m_thread = std::thread([this] { loop(); });
}

Receiver::~Receiver() { stop(); }

void Receiver::stop() {
    m_stop.store(true);
    if (m_thread.joinable() && m_thread.get_id() != std::this_thread::get_id()) m_thread.join();
}

void Receiver::loop() {
    std::string bytes;
    int source = 0;
    while (!m_stop.load()) {
        bool got = false;
        try {
            got = m_mpi.try_recv_bytes(kTag, source, bytes);
        } catch (const std::exception& err) {
            m_on_failure(-1, std::string("rank 0 lost the other ranks' messages: ") + err.what());
            return;
        }
        if (!got) {
            std::unique_lock lock(m_mutex);
            if (std::all_of(m_ended.begin(), m_ended.end(), [](bool e) { return e; })) return;
            lock.unlock();
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            continue;
        }
        Message m;
        try {
            m = decode(bytes);
        } catch (const std::exception& err) {
            m_on_failure(source, std::string("a message from it could not be read: ") + err.what());
            return;
        }
        {
            std::lock_guard lock(m_mutex);
            m_last_heard[size_t(source)] = Clock::now();
        }
        switch (m.kind) {
            case Message::Kind::records:
                for (Published& p : m.records)
                    m_bus.publish(std::move(p.spans), p.record, p.loss_sum, p.loss_samples);
                break;
            case Message::Kind::heartbeat:
                break;
            case Message::Kind::end: {
                std::lock_guard lock(m_mutex);
                m_ended[size_t(source)] = true;
                for (const auto& [device, stats] : m.memory) m_memory[device] = stats;
                m_changed.notify_all();
                break;
            }
            case Message::Kind::failure:
                m_on_failure(source, m.reason);
                return;
        }
    }
}

bool Receiver::wait_ended(double timeout_s) {
    std::unique_lock lock(m_mutex);
    return m_changed.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] {
        return std::all_of(m_ended.begin(), m_ended.end(), [](bool e) { return e; });
    });
}

int Receiver::least_recent(double& silent_s) const {
    std::lock_guard lock(m_mutex);
    int who = -1;
    Clock::time_point oldest = Clock::time_point::max();
    for (size_t r = 1; r < m_last_heard.size(); ++r)
        if (!m_ended[r] && m_last_heard[r] < oldest) oldest = m_last_heard[r], who = int(r);
    silent_s = who < 0 ? 0 : std::chrono::duration<double>(Clock::now() - oldest).count();
    return who;
}

std::map<std::string, MemoryStats> Receiver::end_memory() const {
    std::lock_guard lock(m_mutex);
    return m_memory;
}

// ---- the trained model on rank 0 --------------------------------------------------------------

void gather_model(comm::Communicator& comm, const std::vector<Tensor>& params,
                  const std::vector<Tensor>& buffers, nn::Model* model) {
    std::vector<const Tensor*> mine;
    for (const Tensor& t : params) mine.push_back(&t);
    for (const Tensor& t : buffers) mine.push_back(&t);
    const int64_t n = int64_t(mine.size());
    if (comm.rank() != 0) {
        std::vector<double> mask(static_cast<size_t>(n));
        for (size_t i = 0; i < mine.size(); ++i) mask[i] = mine[i]->defined() ? 1 : 0;
        comm.send(mask.data(), n, DType::f64, 0, kMaskTag);
        for (const Tensor* t : mine)
            if (t->defined()) comm.send(t->raw(), t->numel(), t->dtype(), 0, kTensorTag);
        comm.barrier();  // the messages' copies are freed once rank 0 has them
        return;
    }
    PARALAB_CHECK(model != nullptr, "gather_model: rank 0 needs the model to fill");
    std::vector<Tensor> into;
    for (nn::Param* p : model->parameters()) into.push_back(p->value);
    for (Tensor& b : model->buffers()) into.push_back(b);
    PARALAB_CHECK(into.size() == mine.size(), "gather_model: the model's lists differ from the strategy's");
    std::vector<bool> filled(mine.size(), false);
    for (size_t i = 0; i < mine.size(); ++i)
        if (mine[i]->defined()) {
            into[i].copy_from(*mine[i]);
            filled[i] = true;
        }
    std::vector<double> mask(static_cast<size_t>(n));
    for (int r = 1; r < comm.world(); ++r) {
        comm.recv(mask.data(), n, DType::f64, r, kMaskTag);
        for (size_t i = 0; i < mask.size(); ++i) {
            if (mask[i] == 0) continue;
            // Received in order even where rank 0 already has the part (every rank's copy of
            // a replica's parameters is the same).
            Tensor tmp = Tensor::empty(into[i].shape(), into[i].dtype(), detached_host_device(), MemCategory::communication);
            comm.recv(tmp.raw(), tmp.numel(), tmp.dtype(), r, kTensorTag);
            if (!filled[i]) into[i].copy_from(tmp);
            filled[i] = true;
        }
    }
    comm.barrier();
    for (size_t i = 0; i < filled.size(); ++i)
        PARALAB_CHECK(filled[i], "gather_model: part " + std::to_string(i) + " of the trained model is held by no process");
}

}  // namespace paralab::run::job
