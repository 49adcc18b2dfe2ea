#include "ui/session/run_controller.h"

#include <QThread>

#include "engine/store/run_store.h"

namespace paralab::ui {

class RunController::Observer : public run::RunObserver {
public:
    Observer(RunController& c, store::RunRecorder* recorder) : m_c(c), m_recorder(recorder) {}
    void on_start(const run::Experiment& e, int64_t total) override {
        if (m_recorder) m_recorder->on_start(e, total);
        std::lock_guard lock(m_c.m_mutex);
        m_c.m_totalSteps = total;
    }
    void on_span(const run::Span& s) override {
        if (m_recorder) m_recorder->on_span(s);
    }
    void on_step(const run::StepRecord& r) override {
        if (m_recorder) m_recorder->on_step(r);
        std::lock_guard lock(m_c.m_mutex);
        m_c.m_steps.push_back(r);
    }
    void on_eval(const run::EvalResult& r) override {
        if (m_recorder) m_recorder->on_eval(r);
        std::lock_guard lock(m_c.m_mutex);
        m_c.m_evals.push_back(r);
    }
    void on_finish(const run::RunSummary& s) override {
        if (m_recorder) m_recorder->on_finish(s);
    }

private:
    RunController& m_c;
    store::RunRecorder* m_recorder;
};

RunController::RunController(QObject* parent, QString storePath)
    : QObject(parent), m_storePath(std::move(storePath)) {
    qRegisterMetaType<paralab::run::StepRecord>();
    qRegisterMetaType<paralab::run::EvalResult>();
    qRegisterMetaType<paralab::run::RunSummary>();
    m_drainTimer.setInterval(33);
    connect(&m_drainTimer, &QTimer::timeout, this, &RunController::drain);
}

RunController::~RunController() {
    if (m_thread) {
        m_control.stop = true;
        // Stop is honoured between steps; a wedged step would block here forever.
        if (!m_thread->wait(10000)) qWarning("ParaLab: the run did not stop within 10 s");
    }
}

void RunController::start(run::Experiment experiment) {
    if (m_state != State::Idle) return;
    m_control.stop = false;
    {
        std::lock_guard lock(m_mutex);
        m_steps.clear();
        m_evals.clear();
        m_totalSteps = -1;
        m_haveResult = false;
        m_error.clear();
    }
    m_state = State::Running;
    const std::string storePath =
        m_storePath.isEmpty() ? store::RunStore::default_path() : m_storePath.toStdString();
    m_thread = QThread::create([this, e = std::move(experiment), storePath] {
        run::RunSummary summary;
        QString error;
        try {
            // Every run is kept: a store that cannot be opened stops the run before it starts.
            store::RunStore db(storePath);
            store::RunRecorder recorder(db, run::to_json(e));
            Observer observer(*this, &recorder);
            summary = run::run_experiment(e, &observer, &m_control);
        } catch (const std::exception& ex) {
            error = QString::fromUtf8(ex.what());
        }
        std::lock_guard lock(m_mutex);
        m_summary = summary;
        m_error = error;
        m_haveResult = true;
    });
    connect(m_thread, &QThread::finished, this, &RunController::onThreadFinished);
    m_thread->start();
    m_drainTimer.start();
}

void RunController::stop() {
    if (m_state != State::Running) return;
    m_state = State::Stopping;
    m_control.stop = true;
}

void RunController::drain() {
    QVector<run::StepRecord> steps;
    std::vector<run::EvalResult> evals;
    qint64 total = -1;
    {
        std::lock_guard lock(m_mutex);
        steps.reserve(static_cast<qsizetype>(m_steps.size()));
        for (auto& s : m_steps) steps.push_back(std::move(s));
        m_steps.clear();
        evals.swap(m_evals);
        std::swap(total, m_totalSteps);
    }
    if (total >= 0) emit started(total);
    if (!steps.isEmpty()) emit stepsArrived(steps);
    for (const auto& e : evals) emit evalArrived(e);
}

void RunController::onThreadFinished() {
    m_drainTimer.stop();
    drain();  // the last steps and evaluations
    m_thread->deleteLater();
    m_thread = nullptr;
    m_state = State::Idle;
    run::RunSummary summary;
    QString error;
    {
        std::lock_guard lock(m_mutex);
        summary = m_summary;
        error = m_error;
    }
    if (!error.isEmpty()) emit failed(error);
    else emit finished(summary);
}

}  // namespace paralab::ui
