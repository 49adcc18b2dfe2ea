// The engine on a QThread, for the window (STYLE.md 9). The experiment is handed over by
// value; the run's observer fills the engine's LiveMetrics buffer; a 30 Hz timer on the GUI
// thread drains it and emits batched signals, never one signal per step.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>
#include <QVector>

#include <memory>

#include "engine/run/experiment.h"
#include "engine/run/trainer.h"

class QThread;

namespace paralab::ui {

class RunController : public QObject {
    Q_OBJECT
public:
    // Idle until the first start; Running -> Stopping (after stop()) -> Finished, Stopped or
    // Failed, from any of which start() runs again. Running <-> Paused (pause(), resume()):
    // the devices wait at the next step boundary; stop() ends a paused run too.
    enum class State { Idle, Running, Paused, Stopping, Finished, Stopped, Failed };
    Q_ENUM(State)

    // Runs are recorded in the run store at `storePath` (the default store when empty).
    explicit RunController(QObject* parent = nullptr, QString storePath = {});
    ~RunController() override;  // stops a run and waits for it (with a time limit)

    State state() const { return m_state; }
    bool isRunning() const {
        return m_state == State::Running || m_state == State::Paused || m_state == State::Stopping;
    }

public slots:
    void start(paralab::run::Experiment experiment);
    void stop();
    void pause();
    void resume();

signals:
    void stateChanged(paralab::ui::RunController::State state);
    void started(qint64 totalSteps);
    // The steps over all devices (one record per step, device "all").
    void stepsArrived(const QVector<paralab::run::StepRecord>& steps);
    // One record per device per step, and the timeline's spans, for the per-device views.
    void deviceStepsArrived(const QVector<paralab::run::StepRecord>& steps);
    void spansArrived(const QVector<paralab::run::Span>& spans);
    void evalArrived(const paralab::run::EvalResult& eval);
    // The run ended with status finished, stopped, or failed during training (a NaN loss...);
    // the summary says which and why.
    void finished(const paralab::run::RunSummary& summary);
    // The run could not start (bad data files, a model that does not fit the data...).
    void failed(const QString& message);

private:
    // What the rank thread and the GUI thread share. Held by both, so that a worker still
    // wedged in a step when the controller is destroyed touches nothing freed.
    struct Shared;
    class Observer;
    void drain();
    void onThreadFinished();
    void setState(State state);

    QString m_storePath;
    State m_state = State::Idle;
    QThread* m_thread = nullptr;
    QTimer m_drainTimer;
    std::shared_ptr<Shared> m_shared;
};

}  // namespace paralab::ui

Q_DECLARE_METATYPE(paralab::run::StepRecord)
Q_DECLARE_METATYPE(paralab::run::EvalResult)
Q_DECLARE_METATYPE(paralab::run::RunSummary)
Q_DECLARE_METATYPE(paralab::run::Span)
