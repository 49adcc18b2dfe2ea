// A run's events as lines of JSON, for a viewer in another process: `paralab run --stream`
// writes them on stdout (rank 0 of an MPI job included), and the window's cluster runs read
// them from mpirun's output, so that a job's devices are drawn live like local ones.
//
// One JSON object per line, with "event":
//   {"event":"start","total_steps":N,"devices":[...]}
//   {"event":"steps","device_steps":[...],"steps":[...],"spans":[...]}   (batched, ~10 per s)
//   {"event":"eval","step":S,"loss":L,"accuracy":A|null,"samples":N}
//   {"event":"finish","summary":{...paralab run --json's summary...}}
// Step records and spans carry every field of StepRecord and Span. Lines that are not JSON
// objects (another program's output) are not events: decode says so and the reader skips them.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/trainer.h"

namespace paralab::run::stream {

// Exact for every double they carry (a NaN as null).
nlohmann::json number_json(double x);
double number_from(const nlohmann::json& j);
nlohmann::json record_json(const config::StepRecord& r);
// A step's mixture-of-experts records (StepRecord::moe) as a JSON array of objects {layer,
// tokens_per_expert, dropped_tokens, aux_loss, router_z_loss}, and back (throws on a malformed one).
nlohmann::json moe_json(const std::vector<config::MoERecord>& moe);
std::vector<config::MoERecord> moe_from(const nlohmann::json& j);
config::StepRecord record_from(const nlohmann::json& j);
nlohmann::json span_json(const config::Span& s);
config::Span span_from(const nlohmann::json& j);
nlohmann::json memory_json(const MemoryStats& m);
MemoryStats memory_from(const nlohmann::json& j);
config::RunSummary summary_from(const nlohmann::json& j);  // the shape of store::summary_json

struct Event {
    enum class Kind { start, steps, eval, finish } kind = Kind::steps;
    int64_t total_steps = 0;              // start
    std::vector<std::string> devices;     // start
    std::vector<config::StepRecord> device_steps; // steps: one per device per step
    std::vector<config::StepRecord> steps;        // steps: the step over all devices
    std::vector<config::Span> spans;              // steps
    config::EvalResult eval;                      // eval
    config::RunSummary summary;                   // finish
};
// The event of one line; nullopt for a line that is not one (blank, or another program's).
// Throws Error for a line that is an event but broken.
std::optional<Event> decode(const std::string& line);

// The observer that writes the lines: `out` gets each line (without its newline), from the
// thread that reports the event, one call at a time; steps are batched every `flush_s`.
class Writer : public RunObserver {
public:
    explicit Writer(std::function<void(const std::string&)> out, double flush_s = 0.1);
    void on_start(const config::Experiment& e, int64_t total_steps) override;
    void on_span(const config::Span& s) override;
    void on_step(const config::StepRecord& r) override;
    void on_step_end(const config::StepRecord& r) override;
    void on_eval(const config::EvalResult& r) override;
    // The run's end: `summary` as `paralab run --json` prints it (store::summary_json).
    void finish(const nlohmann::json& summary);

private:
    void flush_locked();
    std::function<void(const std::string&)> m_out;
    const double m_flush_s;
    std::mutex m_mutex;
    nlohmann::json m_device_steps, m_steps, m_spans;  // guarded by m_mutex: the open batch
    std::chrono::steady_clock::time_point m_last_flush;
};

}  // namespace paralab::run::stream
