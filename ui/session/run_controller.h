// The engine on a QThread, for the window (STYLE.md 9). The experiment is handed over by
// value; the rank thread's observer fills a buffer guarded by a mutex; a 30 Hz timer on the
// GUI thread drains it and emits one batched signal, never one signal per step.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <QVector>

#include <mutex>
#include <vector>

#include "engine/run/experiment.h"
#include "engine/run/trainer.h"

class QThread;

namespace paralab::ui {

class RunController : public QObject {
    Q_OBJECT
public:
    enum class State { Idle, Running, Stopping };

    // Runs are recorded in the run store at `storePath` (the default store when empty).
    explicit RunController(QObject* parent = nullptr, QString storePath = {});
    ~RunController() override;  // stops a run and waits for it (with a time limit)

    State state() const { return m_state; }
    bool isRunning() const { return m_state != State::Idle; }

public slots:
    void start(paralab::run::Experiment experiment);
    void stop();

signals:
    void started(qint64 totalSteps);
    void stepsArrived(const QVector<paralab::run::StepRecord>& steps);
    void evalArrived(const paralab::run::EvalResult& eval);
    void finished(const paralab::run::RunSummary& summary);
    // The run could not start (bad data files, a model that does not fit the data...).
    void failed(const QString& message);

private:
    class Observer;
    void drain();
    void onThreadFinished();

    QString m_storePath;
    State m_state = State::Idle;
    QThread* m_thread = nullptr;
    QTimer m_drainTimer;
    run::RunControl m_control;

    std::mutex m_mutex;
    std::vector<run::StepRecord> m_steps;     // guarded by m_mutex
    std::vector<run::EvalResult> m_evals;     // guarded by m_mutex
    qint64 m_totalSteps = -1;                 // guarded by m_mutex; -1 = not yet announced
    bool m_haveResult = false;                // guarded by m_mutex
    run::RunSummary m_summary;                // guarded by m_mutex
    QString m_error;                          // guarded by m_mutex
};

}  // namespace paralab::ui

Q_DECLARE_METATYPE(paralab::run::StepRecord)
Q_DECLARE_METATYPE(paralab::run::EvalResult)
Q_DECLARE_METATYPE(paralab::run::RunSummary)
