// The engine on a QThread, for the window. The experiment is handed over by
// value; the run's observer fills the engine's LiveMetrics buffer; a 30 Hz timer on the GUI
// thread drains it and emits batched signals, never one signal per step.
#pragma once

#include <QString>
#include <QTimer>

#include <memory>

#include "ui/session/run_source.h"

class QThread;

namespace paralab::ui {

class RunController : public RunSource {
    Q_OBJECT
public:
    // Runs are recorded in the run store at `storePath` (the default store when empty).
    explicit RunController(QObject* parent = nullptr, QString storePath = {});
    ~RunController() override;  // stops a run and waits for it (with a time limit)

public slots:
    void start(paralab::config::Experiment experiment) override;
    // Continues stored run `runId` (stopped, interrupted or failed; `experiment` is the one it
    // ran) from its newest checkpoint that reads, under its own id, to the end it set
    // (engine/run/checkpoint.h). No checkpoint to resume from: failed, with the reason.
    void resumeStoredRun(paralab::config::Experiment experiment, qint64 runId);
    void stop() override;
    void pause() override;
    void resume() override;

private:
    // What the rank thread and the GUI thread share. Held by both, so that a worker still
    // wedged in a step when the controller is destroyed touches nothing freed.
    struct Shared;
    class Observer;
    void drain();
    void onThreadFinished();
    void launch(config::Experiment experiment, qint64 resumeRunId);

    QString m_storePath;
    QThread* m_thread = nullptr;
    QTimer m_drainTimer;
    std::shared_ptr<Shared> m_shared;
};

}  // namespace paralab::ui
