#include "ui/session/run_controller.h"

#include <QThread>

#include <mutex>
#include <vector>

#include "engine/run/checkpoint.h"
#include "engine/run/live_metrics.h"
#include "engine/store/run_store.h"

namespace paralab::ui {

struct RunController::Shared {
    run::RunControl control;  // stop and pause are atomics: no lock
    run::Checkpointing checkpoints;  // written beside the store, as `paralab run` writes them
    run::LiveMetrics live;    // locks inside: the rank threads push, the drain timer takes

    std::mutex m_mutex;
    config::RunSummary summary;  // guarded by m_mutex
    QString error;            // guarded by m_mutex; set when the run could not start
};

// Called on the rank threads (through the engine's metrics bus, one call at a time): pushes
// only, so training never waits on the window. The store's recorder sees every step too (it
// batches its own writes).
class RunController::Observer : public run::RunObserver {
public:
    Observer(Shared& shared, store::RunRecorder& recorder, std::string storePath)
        : m_live(shared.live), m_recorder(recorder), m_checkpoints(shared.checkpoints), m_storePath(std::move(storePath)) {}
    void on_start(const config::Experiment& e, int64_t total) override {
        m_recorder.on_start(e, total);
        run::point_checkpoints(m_checkpoints, m_storePath, m_recorder.run_id());
        m_live.on_start(e, total);
    }
    void on_span(const config::Span& s) override {
        m_recorder.on_span(s);
        m_live.on_span(s);
    }
    void on_step(const config::StepRecord& r) override {
        m_recorder.on_step(r);
        m_live.on_step(r);
    }
    void on_step_end(const config::StepRecord& r) override { m_live.on_step_end(r); }
    void on_eval(const config::EvalResult& r) override {
        m_recorder.on_eval(r);
        m_live.on_eval(r);
    }
    void on_finish(const config::RunSummary& s) override { m_recorder.on_finish(s); }

private:
    run::LiveMetrics& m_live;
    store::RunRecorder& m_recorder;
    run::Checkpointing& m_checkpoints;
    std::string m_storePath;
};

RunController::RunController(QObject* parent, QString storePath)
    : RunSource(parent), m_storePath(std::move(storePath)) {
    m_drainTimer.setInterval(33);  // ~30 Hz: smooth to the eye, cheap for the GUI thread
    connect(&m_drainTimer, &QTimer::timeout, this, &RunController::drain);
}

RunController::~RunController() {
    if (!m_thread) return;
    m_shared->control.stop = true;
    // Stop is honoured between steps; a wedged step would block here forever. A worker that
    // outlives us keeps its own reference to the shared state, and its QThread is leaked
    // rather than destroyed while running.
    if (m_thread->wait(10000)) delete m_thread;
    else qWarning("ParaLab: the run did not stop within 10 s");
}

void RunController::start(config::Experiment experiment) {
    launch(std::move(experiment), 0);
}

void RunController::resumeStoredRun(config::Experiment experiment, qint64 runId) {
    launch(std::move(experiment), runId);
}

void RunController::launch(config::Experiment experiment, qint64 resumeRunId) {
    if (isRunning()) return;
    m_shared = std::make_shared<Shared>();
    const std::string storePath =
        m_storePath.isEmpty() ? store::RunStore::default_path() : m_storePath.toStdString();
    m_shared->control.checkpoints = &m_shared->checkpoints;
    if (resumeRunId > 0) {
        m_shared->checkpoints.folder = run::checkpoint_folder(storePath, resumeRunId);
        m_shared->checkpoints.resume = true;
    }
    m_thread = QThread::create([shared = m_shared, e = std::move(experiment), storePath, resumeRunId] {
        config::RunSummary summary;
        QString error;
        try {
            // Every run is kept: a store that cannot be opened stops the run before it starts.
            store::RunStore db(storePath);
            store::RunRecorder recorder(db, run::to_json(e));
            if (resumeRunId > 0)
                recorder.resume(resumeRunId, [shared] { return shared->checkpoints.resumed_from_step; });
            Observer observer(*shared, recorder, storePath);
            summary = run::run_experiment(e, &observer, &shared->control);
        } catch (const std::exception& ex) {
            error = QString::fromUtf8(ex.what());
            if (error.isEmpty()) error = QStringLiteral("the run could not start");
        }
        std::lock_guard lock(shared->m_mutex);
        shared->summary = std::move(summary);
        shared->error = error;
    });
    connect(m_thread, &QThread::finished, this, &RunController::onThreadFinished);
    setState(State::Running);
    m_thread->start();
    m_drainTimer.start();
}

void RunController::stop() {
    if (state() != State::Running && state() != State::Paused) return;
    m_shared->control.stop = true;
    setState(State::Stopping);
}

void RunController::pause() {
    if (state() != State::Running) return;
    m_shared->control.pause = true;  // the ranks wait before their next step
    setState(State::Paused);
}

void RunController::resume() {
    if (state() != State::Paused) return;
    m_shared->control.pause = false;
    setState(State::Running);
}

void RunController::drain() {
    if (!m_shared) return;
    run::LiveMetrics::Frame f = m_shared->live.drain();
    if (f.empty()) return;
    if (f.total_steps >= 0) emit started(f.total_steps);
    if (!f.steps.empty()) emit stepsArrived(QVector<config::StepRecord>(f.steps.begin(), f.steps.end()));
    if (!f.device_steps.empty())
        emit deviceStepsArrived(QVector<config::StepRecord>(f.device_steps.begin(), f.device_steps.end()));
    if (!f.spans.empty()) emit spansArrived(QVector<config::Span>(f.spans.begin(), f.spans.end()));
    for (const auto& e : f.evals) emit evalArrived(e);  // a few per run: one signal each is fine
}

void RunController::onThreadFinished() {
    m_drainTimer.stop();
    drain();  // the last steps and evaluations
    m_thread->wait();  // `finished` comes just before the thread ends: at most a moment
    delete m_thread;
    m_thread = nullptr;
    config::RunSummary summary;
    QString error;
    {
        std::lock_guard lock(m_shared->m_mutex);
        summary = m_shared->summary;
        error = m_shared->error;
    }
    if (!error.isEmpty()) {
        setState(State::Failed);
        emit failed(error);
        return;
    }
    setState(summary.status == "finished" ? State::Finished
             : summary.status == "stopped" ? State::Stopped
                                           : State::Failed);
    emit finished(summary);
}

}  // namespace paralab::ui
