#include "engine/run/event_stream.h"

#include <cmath>
#include <limits>

#include "engine/util/error.h"

namespace paralab::run::stream {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

}  // namespace

json number_json(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }
double number_from(const json& j) { return j.is_null() ? std::numeric_limits<double>::quiet_NaN() : j.get<double>(); }

json memory_json(const MemoryStats& m) {
    return json{{"current", m.current},           {"peak", m.peak},
                {"current_total", m.current_total}, {"peak_total", m.peak_total},
                {"cached", m.cached_bytes},         {"system_allocs", m.system_allocs},
                {"step_peak_total", m.step_peak_total}, {"at_step_peak", m.at_step_peak}};
}

MemoryStats memory_from(const json& j) {
    MemoryStats m;
    m.current = j.at("current").get<decltype(m.current)>();
    m.peak = j.at("peak").get<decltype(m.peak)>();
    m.current_total = j.at("current_total").get<int64_t>();
    m.peak_total = j.at("peak_total").get<int64_t>();
    m.cached_bytes = j.at("cached").get<int64_t>();
    m.system_allocs = j.at("system_allocs").get<int64_t>();
    // A stream written before the step peak was kept has none.
    if (j.contains("step_peak_total")) {
        m.step_peak_total = j.at("step_peak_total").get<int64_t>();
        m.at_step_peak = j.at("at_step_peak").get<decltype(m.at_step_peak)>();
    }
    return m;
}

json record_json(const config::StepRecord& r) {
    json j{{"step", r.step},
                {"epoch", r.epoch},
                {"steps_per_epoch", r.steps_per_epoch},
                {"total_steps", r.total_steps},
                {"device", r.device},
                {"loss", number_json(r.loss)},
                {"samples", r.samples},
                {"lr", r.lr},
                {"wall_s", r.wall_s},
                {"compute_ms", r.compute_ms},
                {"comm_ms", r.comm_ms},
                {"idle_ms", r.idle_ms},
                {"data_wait_ms", r.data_wait_ms},
                {"grad_norm", number_json(r.grad_norm)},
                {"memory", memory_json(r.memory)}};
    if (!r.moe.empty()) j["moe"] = moe_json(r.moe);
    return j;
}

json moe_json(const std::vector<config::MoERecord>& moe) {
    json out = json::array();
    for (const config::MoERecord& m : moe)
        out.push_back(json{{"layer", m.layer},
                           {"tokens_per_expert", m.tokens_per_expert},
                           {"dropped_tokens", m.dropped_tokens},
                           {"aux_loss", number_json(m.aux_loss)},
                           {"router_z_loss", number_json(m.router_z_loss)}});
    return out;
}

std::vector<config::MoERecord> moe_from(const json& j) {
    std::vector<config::MoERecord> out;
    for (const json& m : j) {
        config::MoERecord r;
        r.layer = m.at("layer").get<std::string>();
        r.tokens_per_expert = m.at("tokens_per_expert").get<std::vector<int64_t>>();
        r.dropped_tokens = m.at("dropped_tokens").get<int64_t>();
        r.aux_loss = number_from(m.at("aux_loss"));
        r.router_z_loss = number_from(m.at("router_z_loss"));
        out.push_back(std::move(r));
    }
    return out;
}

config::StepRecord record_from(const json& j) {
    config::StepRecord r;
    r.step = j.at("step").get<int64_t>();
    r.epoch = j.at("epoch").get<int64_t>();
    r.steps_per_epoch = j.at("steps_per_epoch").get<int64_t>();
    r.total_steps = j.at("total_steps").get<int64_t>();
    r.device = j.at("device").get<std::string>();
    r.loss = number_from(j.at("loss"));
    r.samples = j.at("samples").get<int64_t>();
    r.lr = j.at("lr").get<double>();
    r.wall_s = j.at("wall_s").get<double>();
    r.compute_ms = j.at("compute_ms").get<double>();
    r.comm_ms = j.at("comm_ms").get<double>();
    r.idle_ms = j.at("idle_ms").get<double>();
    r.data_wait_ms = j.at("data_wait_ms").get<double>();
    r.grad_norm = number_from(j.at("grad_norm"));
    r.memory = memory_from(j.at("memory"));
    if (j.contains("moe")) r.moe = moe_from(j.at("moe"));
    return r;
}

json span_json(const config::Span& s) { return json::array({s.step, s.device, s.phase, s.t_begin, s.t_end, s.bytes}); }

config::Span span_from(const json& j) {
    config::Span s;
    s.step = j.at(0).get<int64_t>();
    s.device = j.at(1).get<std::string>();
    s.phase = j.at(2).get<std::string>();
    s.t_begin = j.at(3).get<double>();
    s.t_end = j.at(4).get<double>();
    s.bytes = j.at(5).get<int64_t>();
    return s;
}

config::RunSummary summary_from(const json& j) {
    config::RunSummary s;
    s.status = j.at("status").get<std::string>();
    s.error = j.value("error", std::string());
    s.name = j.at("name").get<std::string>();
    s.strategy = j.at("strategy").get<std::string>();
    s.devices = j.at("devices").get<std::vector<std::string>>();
    s.steps = j.at("steps").get<int64_t>();
    s.epochs = j.at("epochs").get<int64_t>();
    s.final_loss = number_from(j.at("final_loss"));
    if (!j.at("test_loss").is_null()) s.test_loss = j.at("test_loss").get<double>();
    if (!j.at("test_accuracy").is_null()) s.test_accuracy = j.at("test_accuracy").get<double>();
    s.samples_per_s = j.at("samples_per_s").get<double>();
    s.wall_s = j.at("wall_s").get<double>();
    s.peak_memory_bytes = j.at("peak_memory_bytes").get<std::map<std::string, int64_t>>();
    s.parameters = j.at("parameters").get<int64_t>();
    return s;
}

std::optional<Event> decode(const std::string& line) {
    if (line.empty() || line.front() != '{') return std::nullopt;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("event")) return std::nullopt;
    try {
        Event e;
        const std::string kind = j.at("event").get<std::string>();
        if (kind == "start") {
            e.kind = Event::Kind::start;
            e.total_steps = j.at("total_steps").get<int64_t>();
            e.devices = j.at("devices").get<std::vector<std::string>>();
        } else if (kind == "steps") {
            e.kind = Event::Kind::steps;
            for (const json& r : j.at("device_steps")) e.device_steps.push_back(record_from(r));
            for (const json& r : j.at("steps")) e.steps.push_back(record_from(r));
            for (const json& s : j.at("spans")) e.spans.push_back(span_from(s));
        } else if (kind == "eval") {
            e.kind = Event::Kind::eval;
            e.eval.step = j.at("step").get<int64_t>();
            e.eval.loss = j.at("loss").get<double>();
            if (!j.at("accuracy").is_null()) e.eval.accuracy = j.at("accuracy").get<double>();
            e.eval.samples = j.at("samples").get<int64_t>();
            if (j.contains("text")) {  // a text model's sample
                e.eval.prompt = j.value("prompt", std::string());
                e.eval.sample = j.at("text").get<std::string>();
            }
        } else if (kind == "finish") {
            e.kind = Event::Kind::finish;
            e.summary = summary_from(j.at("summary"));
        } else {
            return std::nullopt;  // a later version's event: nothing this reader knows
        }
        return e;
    } catch (const json::exception& err) {
        throw Error(std::string("a run event could not be read (") + err.what() + "): " + line.substr(0, 200));
    }
}

Writer::Writer(std::function<void(const std::string&)> out, double flush_s)
    : m_out(std::move(out)), m_flush_s(flush_s), m_device_steps(json::array()), m_steps(json::array()),
      m_spans(json::array()), m_last_flush(Clock::now()) {}

void Writer::on_start(const config::Experiment& e, int64_t total_steps) {
    std::lock_guard lock(m_mutex);
    m_out(json{{"event", "start"}, {"total_steps", total_steps}, {"devices", e.devices}}.dump());
}

void Writer::on_span(const config::Span& s) {
    std::lock_guard lock(m_mutex);
    m_spans.push_back(span_json(s));
}

void Writer::on_step(const config::StepRecord& r) {
    std::lock_guard lock(m_mutex);
    m_device_steps.push_back(record_json(r));
}

void Writer::on_step_end(const config::StepRecord& r) {
    std::lock_guard lock(m_mutex);
    m_steps.push_back(record_json(r));
    if (std::chrono::duration<double>(Clock::now() - m_last_flush).count() >= m_flush_s) flush_locked();
}

void Writer::on_eval(const config::EvalResult& r) {
    std::lock_guard lock(m_mutex);
    flush_locked();
    json event{{"event", "eval"},
               {"step", r.step},
               {"loss", r.loss},
               {"accuracy", r.accuracy ? json(*r.accuracy) : json(nullptr)},
               {"samples", r.samples}};
    if (!r.sample.empty()) event["prompt"] = r.prompt, event["text"] = r.sample;
    m_out(event.dump());
}

void Writer::finish(const json& summary) {
    std::lock_guard lock(m_mutex);
    flush_locked();
    m_out(json{{"event", "finish"}, {"summary", summary}}.dump());
}

void Writer::flush_locked() {
    m_last_flush = Clock::now();
    if (m_device_steps.empty() && m_steps.empty() && m_spans.empty()) return;
    json line{{"event", "steps"}, {"device_steps", std::move(m_device_steps)}, {"steps", std::move(m_steps)},
              {"spans", std::move(m_spans)}};
    m_device_steps = json::array();
    m_steps = json::array();
    m_spans = json::array();
    m_out(line.dump());
}

}  // namespace paralab::run::stream
