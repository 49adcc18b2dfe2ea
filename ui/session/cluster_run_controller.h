// A run across the processes of an MPI job, for the window: the experiment is
// written to a file, `mpirun ... paralab run FILE --devices cpu:0 --db STORE --stream` is
// started through QProcess, and rank 0's event lines (engine/run/event_stream.h) are decoded on
// a thread of their own; a 30 Hz timer on the GUI thread drains what was decoded and emits the
// same batched signals as RunController, so the views draw every rank's devices live.
//
// Pause, resume and stop are signals to mpirun, which forwards them to every rank: SIGUSR1
// pauses at the next step boundary, SIGUSR2 resumes, SIGALRM stops cleanly (rank 0 then writes
// its summary and every process exits). A job that has not ended 10 s after Stop gets SIGTERM
// (mpirun then kills the ranks), and SIGKILL 10 s later. mpirun's last stderr lines are kept to
// explain a job that ends without a summary. Nothing here blocks the GUI thread, but the
// destructor, which stops a job and waits for it with a time limit.
#pragma once

#include <QProcess>
#include <QStringList>
#include <QTimer>

#include <memory>
#include <string>

#include "ui/session/cluster_settings.h"
#include "ui/session/run_source.h"

class QTemporaryFile;
class QThread;

namespace paralab::ui {

class ClusterRunController : public RunSource {
    Q_OBJECT
public:
    // Runs are recorded by rank 0 in the run store at `storePath` (the default store when
    // empty): a path rank 0's host must see.
    explicit ClusterRunController(QObject* parent = nullptr, QString storePath = {});
    ~ClusterRunController() override;

    // Where the job runs; taken at start().
    void setSettings(const ClusterSettings& settings) { m_settings = settings; }
    const ClusterSettings& settings() const { return m_settings; }
    // The paralab program every process runs: this program by default
    // (QCoreApplication::applicationFilePath()); tests give the built paralab.
    void setProgram(const QString& path) { m_program = path; }
    QString program() const;

    // The running job's mpirun (0 when none), the command line of the last job (program first),
    // and mpirun's last stderr lines (at most kStderrLines).
    qint64 processId() const;
    QStringList commandLine() const { return m_commandLine; }
    QStringList stderrTail() const { return m_stderr; }
    static constexpr int kStderrLines = 50;

public slots:
    void start(paralab::config::Experiment experiment) override;
    void stop() override;
    void pause() override;
    void resume() override;

private:
    struct Shared;  // the decoder thread and the GUI thread: lines in, events out
    void refuse(const QString& message);
    void readStdout();
    void readStderr();
    void onProcessFinished(int exitCode, QProcess::ExitStatus status);
    void onProcessError(QProcess::ProcessError error);
    void closeInput();
    void onDecoderFinished();
    void drain();
    void signalJob(int signal);
    void escalateStop();
    QString failureText() const;

    QString m_storePath;
    QString m_program;
    ClusterSettings m_settings;
    QProcess* m_process = nullptr;
    QThread* m_decoder = nullptr;
    std::shared_ptr<Shared> m_shared;
    std::unique_ptr<QTemporaryFile> m_experimentFile;
    QByteArray m_stdoutPartial;  // a line not ended yet
    QByteArray m_stderrPartial;
    QStringList m_stderr;
    QStringList m_commandLine;
    QTimer m_drainTimer;
    QTimer m_stopTimer;          // escalates a Stop the job does not honour
    int m_stopStage = 0;         // 0 none, 1 SIGALRM sent, 2 SIGTERM sent, 3 killed
    bool m_started = false;      // the start event was heard: every rank handles the signals
    bool m_pausePending = false; // Pause before the start event: sent when it comes
    bool m_inputClosed = false;
    QString m_startError;        // mpirun could not be started
    int m_exitCode = 0;
    QProcess::ExitStatus m_exitStatus = QProcess::NormalExit;
    qint64 m_lastStep = 0;
    std::string m_experimentName, m_strategy;  // for a job stopped before it trained
};

}  // namespace paralab::ui
