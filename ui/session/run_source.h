// What the window starts, pauses and stops, and what it hears back: a run on this machine's
// rank threads (RunController) or a job across MPI processes (ClusterRunController). Both
// emit the same batched signals (~30 Hz, never one per step), so the views are wired once.
#pragma once

#include <QObject>
#include <QString>
#include <QVector>

#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"

namespace paralab::ui {

class RunSource : public QObject {
    Q_OBJECT
public:
    // Idle until the first start; Running -> Stopping (after stop()) -> Finished, Stopped or
    // Failed, from any of which start() runs again. Running <-> Paused (pause(), resume()):
    // the devices wait at the next step boundary; stop() ends a paused run too.
    enum class State { Idle, Running, Paused, Stopping, Finished, Stopped, Failed };
    Q_ENUM(State)

    State state() const { return m_state; }
    bool isRunning() const {
        return m_state == State::Running || m_state == State::Paused || m_state == State::Stopping;
    }

public slots:
    virtual void start(paralab::config::Experiment experiment) = 0;
    virtual void stop() = 0;
    virtual void pause() = 0;
    virtual void resume() = 0;

signals:
    void stateChanged(paralab::ui::RunSource::State state);
    void started(qint64 totalSteps);
    // The steps over all devices (one record per step, device "all").
    void stepsArrived(const QVector<paralab::config::StepRecord>& steps);
    // One record per device per step, and the timeline's spans, for the per-device views.
    void deviceStepsArrived(const QVector<paralab::config::StepRecord>& steps);
    void spansArrived(const QVector<paralab::config::Span>& spans);
    void evalArrived(const paralab::config::EvalResult& eval);
    // The run ended with status finished, stopped, or failed during training (a NaN loss...);
    // the summary says which and why.
    void finished(const paralab::config::RunSummary& summary);
    // The run could not start (bad data files, a model that does not fit the data, a job
    // mpirun could not launch...), or a job ended without saying how.
    void failed(const QString& message);

protected:
    explicit RunSource(QObject* parent = nullptr);
    void setState(State state);

private:
    State m_state = State::Idle;
};

}  // namespace paralab::ui

Q_DECLARE_METATYPE(paralab::config::StepRecord)
Q_DECLARE_METATYPE(paralab::config::EvalResult)
Q_DECLARE_METATYPE(paralab::config::RunSummary)
Q_DECLARE_METATYPE(paralab::config::Span)
