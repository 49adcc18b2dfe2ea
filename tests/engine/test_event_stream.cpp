// The event stream (engine/run/event_stream.h): what a run's observer hears, written as JSON
// lines and read back, is the same events with every field (doubles exactly, NaN as NaN), and
// lines that are not events are told apart from broken events.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/run/event_stream.h"
#include "engine/run/experiment_file.h"
#include "engine/util/error.h"

using namespace paralab;
using namespace paralab::run;

namespace {

// Every event a run reports, as heard.
class Recorded : public RunObserver {
public:
    void on_start(const config::Experiment& e, int64_t n) override { devices = e.devices, total = n; }
    void on_span(const config::Span& s) override { spans.push_back(s); }
    void on_step(const config::StepRecord& r) override { device_steps.push_back(r); }
    void on_step_end(const config::StepRecord& r) override { steps.push_back(r); }
    void on_eval(const config::EvalResult& r) override { evals.push_back(r); }
    std::vector<std::string> devices;
    int64_t total = 0;
    std::vector<config::Span> spans;
    std::vector<config::StepRecord> device_steps, steps;
    std::vector<config::EvalResult> evals;
};

class Both : public RunObserver {
public:
    Both(RunObserver& a, RunObserver& b) : m_a(a), m_b(b) {}
    void on_start(const config::Experiment& e, int64_t n) override { m_a.on_start(e, n), m_b.on_start(e, n); }
    void on_span(const config::Span& s) override { m_a.on_span(s), m_b.on_span(s); }
    void on_step(const config::StepRecord& r) override { m_a.on_step(r), m_b.on_step(r); }
    void on_step_end(const config::StepRecord& r) override { m_a.on_step_end(r), m_b.on_step_end(r); }
    void on_eval(const config::EvalResult& r) override { m_a.on_eval(r), m_b.on_eval(r); }

private:
    RunObserver &m_a, &m_b;
};

bool same(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

void expect_same(const config::StepRecord& a, const config::StepRecord& b) {
    EXPECT_EQ(a.step, b.step);
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.steps_per_epoch, b.steps_per_epoch);
    EXPECT_EQ(a.total_steps, b.total_steps);
    EXPECT_EQ(a.device, b.device);
    EXPECT_TRUE(same(a.loss, b.loss)) << a.loss << " " << b.loss;
    EXPECT_EQ(a.samples, b.samples);
    EXPECT_EQ(a.lr, b.lr);
    EXPECT_EQ(a.wall_s, b.wall_s);
    EXPECT_EQ(a.compute_ms, b.compute_ms);
    EXPECT_EQ(a.comm_ms, b.comm_ms);
    EXPECT_EQ(a.idle_ms, b.idle_ms);
    EXPECT_EQ(a.data_wait_ms, b.data_wait_ms);
    EXPECT_TRUE(same(a.grad_norm, b.grad_norm));
    EXPECT_EQ(a.memory.peak, b.memory.peak);
    EXPECT_EQ(a.memory.current, b.memory.current);
    EXPECT_EQ(a.memory.peak_total, b.memory.peak_total);
}

TEST(EventStream, ARunReadBackFromItsLinesIsTheRunAsHeard) {
    const config::Experiment e = parse_experiment(nlohmann::json::parse(R"({
      "paralab": 1, "name": "stream", "seed": 2, "devices": ["cpu:0", "cpu:1"],
      "data": {"dataset": "spirals", "samples": 200, "classes": 3, "batch_size": 16},
      "model": {"layers": [{"type": "linear", "out": 16}, {"type": "relu"}, {"type": "linear", "out": 3}],
                "loss": "cross_entropy"},
      "strategy": {"type": "pipeline", "micro_batches": 2},
      "optimizer": {"type": "sgd", "lr": 0.1},
      "train": {"epochs": 1, "max_steps": 7, "eval_every": 3}
    })"));
    std::vector<std::string> lines;
    stream::Writer writer([&](const std::string& line) { lines.push_back(line); }, 0.0);
    Recorded heard;
    Both both(heard, writer);
    const config::RunSummary s = run_experiment(e, &both, nullptr);
    writer.finish(nlohmann::json{{"status", s.status}, {"name", s.name}, {"strategy", s.strategy},
                                 {"devices", s.devices}, {"steps", s.steps}, {"epochs", s.epochs},
                                 {"final_loss", s.final_loss}, {"test_loss", *s.test_loss},
                                 {"test_accuracy", nullptr}, {"samples_per_s", s.samples_per_s},
                                 {"wall_s", s.wall_s}, {"peak_memory_bytes", s.peak_memory_bytes},
                                 {"parameters", s.parameters}});
    ASSERT_EQ(s.status, "finished") << s.error;

    Recorded read;
    std::vector<stream::Event::Kind> kinds;
    config::RunSummary summary;
    for (const std::string& line : lines) {
        ASSERT_EQ(line.find('\n'), std::string::npos);
        const auto ev = stream::decode(line);
        ASSERT_TRUE(ev) << line;
        kinds.push_back(ev->kind);
        if (ev->kind == stream::Event::Kind::start) read.devices = ev->devices, read.total = ev->total_steps;
        for (const auto& r : ev->device_steps) read.device_steps.push_back(r);
        for (const auto& r : ev->steps) read.steps.push_back(r);
        for (const auto& sp : ev->spans) read.spans.push_back(sp);
        if (ev->kind == stream::Event::Kind::eval) read.evals.push_back(ev->eval);
        if (ev->kind == stream::Event::Kind::finish) summary = ev->summary;
    }
    ASSERT_GE(kinds.size(), 4u);
    EXPECT_EQ(kinds.front(), stream::Event::Kind::start);
    EXPECT_EQ(kinds.back(), stream::Event::Kind::finish);
    EXPECT_EQ(read.devices, heard.devices);
    EXPECT_EQ(read.total, 7);
    ASSERT_EQ(read.device_steps.size(), heard.device_steps.size());
    for (size_t i = 0; i < heard.device_steps.size(); ++i) expect_same(read.device_steps[i], heard.device_steps[i]);
    ASSERT_EQ(read.steps.size(), 7u);
    for (size_t i = 0; i < heard.steps.size(); ++i) expect_same(read.steps[i], heard.steps[i]);
    // The first stage computes no loss: its records' loss is NaN, and stays NaN.
    EXPECT_TRUE(std::isnan(read.device_steps.front().loss) || std::isnan(read.device_steps[1].loss));
    ASSERT_EQ(read.spans.size(), heard.spans.size());
    for (size_t i = 0; i < heard.spans.size(); ++i) {
        EXPECT_EQ(read.spans[i].phase, heard.spans[i].phase);
        EXPECT_EQ(read.spans[i].device, heard.spans[i].device);
        EXPECT_EQ(read.spans[i].t_begin, heard.spans[i].t_begin);
        EXPECT_EQ(read.spans[i].t_end, heard.spans[i].t_end);
        EXPECT_EQ(read.spans[i].bytes, heard.spans[i].bytes);
    }
    ASSERT_EQ(read.evals.size(), heard.evals.size());
    EXPECT_EQ(read.evals[0].loss, heard.evals[0].loss);
    EXPECT_EQ(summary.steps, 7);
    EXPECT_EQ(summary.final_loss, s.final_loss);
    EXPECT_EQ(summary.devices, s.devices);
    EXPECT_FALSE(summary.test_accuracy.has_value());
}

TEST(EventStream, LinesThatAreNotEventsAreSkippedAndBrokenEventsSaySo) {
    EXPECT_FALSE(stream::decode(""));
    EXPECT_FALSE(stream::decode("epoch 1  step 3/10  loss 0.5"));
    EXPECT_FALSE(stream::decode("{\"run_id\": 3, \"status\": \"finished\"}"));  // --json's summary
    EXPECT_FALSE(stream::decode("{\"event\": \"from_a_later_version\"}"));
    EXPECT_FALSE(stream::decode("{not json"));
    EXPECT_THROW(stream::decode("{\"event\": \"steps\", \"device_steps\": [{\"step\": 1}], \"steps\": [], \"spans\": []}"),
                 Error);
    EXPECT_THROW(stream::decode("{\"event\": \"start\"}"), Error);
}

// A mixture-of-experts step's routing travels with its record (a job's processes send their
// records as lines); a record without one stays without.
TEST(EventStream, AStepsMixtureOfExpertsRoutingRoundTrips) {
    config::StepRecord r;
    r.step = 3;
    r.device = "cpu:1";
    config::MoERecord m;
    m.layer = "model.layers[1] (transformer_block).mlp.moe";
    m.tokens_per_expert = {5, 0, 11};
    m.dropped_tokens = 2;
    m.aux_loss = 0.0123456789012345;
    m.router_z_loss = 1e-3;
    r.moe = {m};
    const config::StepRecord back = stream::record_from(stream::record_json(r));
    ASSERT_EQ(back.moe.size(), 1u);
    EXPECT_EQ(back.moe[0].layer, m.layer);
    EXPECT_EQ(back.moe[0].tokens_per_expert, m.tokens_per_expert);
    EXPECT_EQ(back.moe[0].dropped_tokens, 2);
    EXPECT_EQ(back.moe[0].aux_loss, m.aux_loss);
    EXPECT_EQ(back.moe[0].router_z_loss, m.router_z_loss);
    r.moe.clear();
    EXPECT_FALSE(stream::record_json(r).contains("moe"));
    EXPECT_TRUE(stream::record_from(stream::record_json(r)).moe.empty());
}

}  // namespace
