#include "ui/session/cluster_run_controller.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QProcessEnvironment>
#include <QTemporaryFile>
#include <QThread>

#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/types.h>

#include "engine/run/event_stream.h"
#include "engine/store/run_store.h"

namespace paralab::ui {

// The GUI thread hands mpirun's stdout lines in; the decoder thread parses them (a batch of
// steps and spans of many devices is a long line) and leaves the events for the drain timer.
struct ClusterRunController::Shared {
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::deque<std::string> lines;  // guarded by m_mutex: not decoded yet
    bool closed = false;            // guarded by m_mutex: no more lines will come

    int64_t total_steps = -1;                   // guarded by m_mutex: the start event, once
    std::vector<config::StepRecord> steps;         // guarded by m_mutex
    std::vector<config::StepRecord> device_steps;  // guarded by m_mutex
    std::vector<config::Span> spans;               // guarded by m_mutex
    std::vector<config::EvalResult> evals;         // guarded by m_mutex
    std::optional<config::RunSummary> summary;     // guarded by m_mutex: the finish event
    QString decodeError;                        // guarded by m_mutex: the first broken event

    // The decoder thread's loop: returns once the input is closed and every line decoded.
    void decodeAll() {
        for (;;) {
            std::deque<std::string> batch;
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [this] { return !lines.empty() || closed; });
                if (lines.empty()) return;  // closed, and nothing left
                batch.swap(lines);
            }
            std::vector<run::stream::Event> events;
            QString error;
            for (const std::string& line : batch) {
                try {
                    if (auto e = run::stream::decode(line)) events.push_back(std::move(*e));
                } catch (const std::exception& err) {
                    if (error.isEmpty()) error = QString::fromUtf8(err.what());
                }
            }
            std::lock_guard lock(m_mutex);
            if (decodeError.isEmpty()) decodeError = error;
            for (auto& e : events) {
                using Kind = run::stream::Event::Kind;
                switch (e.kind) {
                case Kind::start: total_steps = e.total_steps; break;
                case Kind::steps:
                    steps.insert(steps.end(), e.steps.begin(), e.steps.end());
                    device_steps.insert(device_steps.end(), e.device_steps.begin(), e.device_steps.end());
                    spans.insert(spans.end(), e.spans.begin(), e.spans.end());
                    break;
                case Kind::eval: evals.push_back(e.eval); break;
                case Kind::finish: summary = std::move(e.summary); break;
                }
            }
        }
    }
};

ClusterRunController::ClusterRunController(QObject* parent, QString storePath)
    : RunSource(parent), m_storePath(std::move(storePath)) {
    m_drainTimer.setInterval(33);  // ~30 Hz, as RunController
    connect(&m_drainTimer, &QTimer::timeout, this, &ClusterRunController::drain);
    m_stopTimer.setSingleShot(true);
    connect(&m_stopTimer, &QTimer::timeout, this, &ClusterRunController::escalateStop);
}

ClusterRunController::~ClusterRunController() {
    m_drainTimer.stop();
    m_stopTimer.stop();
    if (m_process) {
        // Nothing is emitted from here on: the job is ended and waited for, with time limits.
        m_process->disconnect(this);
        if (m_process->state() != QProcess::NotRunning) {
            signalJob(m_started ? SIGALRM : SIGTERM);
            if (!m_process->waitForFinished(10000)) {
                signalJob(SIGTERM);
                if (!m_process->waitForFinished(10000)) {
                    m_process->kill();
                    m_process->waitForFinished(2000);
                }
            }
        }
    }
    if (m_decoder) {
        m_decoder->disconnect(this);
        closeInput();
        m_decoder->wait();  // decoding what is left of the lines: moments
        delete m_decoder;
    }
}

QString ClusterRunController::program() const {
    return m_program.isEmpty() ? QCoreApplication::applicationFilePath() : m_program;
}

qint64 ClusterRunController::processId() const {
    return m_process ? m_process->processId() : 0;
}

void ClusterRunController::refuse(const QString& message) {
    setState(State::Failed);
    emit failed(message);
}

void ClusterRunController::start(config::Experiment experiment) {
    if (isRunning()) return;
    const QString problems = m_settings.problemText();
    if (!problems.isEmpty()) return refuse(tr("The cluster settings are not complete: %1").arg(problems));
    const QString mpirun = m_settings.resolvedMpirun();
    const QFileInfo programInfo(program());
    if (!programInfo.isFile() || !programInfo.isExecutable())
        return refuse(tr("%1: the paralab program each process runs is not an executable file").arg(program()));

    // The experiment as a file the processes read: in the shared folder when one is set (every
    // host must see it at the same path), else in this machine's temporary folder.
    const QString dir = m_settings.sharedDir.isEmpty() ? QDir::tempPath() : m_settings.sharedDir;
    auto file = std::make_unique<QTemporaryFile>(dir + QStringLiteral("/paralab-job-XXXXXX.paralab.json"));
    const std::string text = run::to_json(experiment).dump(2) + "\n";
    if (!file->open() || file->write(text.data(), static_cast<qint64>(text.size())) < 0 || !file->flush())
        return refuse(tr("%1: cannot write the job's experiment file: %2").arg(dir, file->errorString()));
    file->close();
    m_experimentFile = std::move(file);

    const QString store = m_storePath.isEmpty() ? QString::fromStdString(store::RunStore::default_path()) : m_storePath;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    QStringList exported;
    if (m_settings.allLocal()) {
        for (const auto& [name, value] : localTransportSettings()) {
            if (!env.contains(name)) env.insert(name, value);  // the caller's own settings win
            exported << name;
        }
    }
    QStringList args = m_settings.mpirunArguments(exported);
    args << program() << QStringLiteral("run") << m_experimentFile->fileName() << QStringLiteral("--devices")
         << m_settings.processDevices() << QStringLiteral("--db") << store << QStringLiteral("--stream");
    m_commandLine = QStringList{mpirun} + args;

    m_shared = std::make_shared<Shared>();
    m_stdoutPartial.clear();
    m_stderrPartial.clear();
    m_stderr.clear();
    m_stopStage = 0;
    m_started = false;
    m_pausePending = false;
    m_inputClosed = false;
    m_startError.clear();
    m_exitCode = 0;
    m_exitStatus = QProcess::NormalExit;
    m_lastStep = 0;
    m_experimentName = experiment.name;
    m_strategy = experiment.strategy.type;

    m_decoder = QThread::create([shared = m_shared] { shared->decodeAll(); });
    connect(m_decoder, &QThread::finished, this, &ClusterRunController::onDecoderFinished);
    m_process = new QProcess(this);
    m_process->setProgram(mpirun);
    m_process->setArguments(args);
    m_process->setProcessEnvironment(env);
    connect(m_process, &QProcess::readyReadStandardOutput, this, &ClusterRunController::readStdout);
    connect(m_process, &QProcess::readyReadStandardError, this, &ClusterRunController::readStderr);
    connect(m_process, &QProcess::finished, this, &ClusterRunController::onProcessFinished);
    connect(m_process, &QProcess::errorOccurred, this, &ClusterRunController::onProcessError);
    setState(State::Running);
    m_decoder->start();
    m_drainTimer.start();
    m_process->start();
}

void ClusterRunController::stop() {
    if (state() != State::Running && state() != State::Paused) return;
    setState(State::Stopping);
    // Before the start event a rank may not handle SIGALRM yet (its default ends the process):
    // mpirun's SIGTERM ends the job then, which has not trained yet.
    if (m_started) {
        signalJob(SIGALRM);
        m_stopStage = 1;
    } else {
        signalJob(SIGTERM);
        m_stopStage = 2;
    }
    m_stopTimer.start(10000);
}

void ClusterRunController::escalateStop() {
    if (!m_process || m_process->state() == QProcess::NotRunning) return;
    if (m_stopStage == 1) {
        qWarning("ParaLab: the job did not stop within 10 s of SIGALRM; sending mpirun SIGTERM");
        signalJob(SIGTERM);
        m_stopStage = 2;
        m_stopTimer.start(10000);
    } else if (m_stopStage == 2) {
        qWarning("ParaLab: mpirun did not end within 10 s of SIGTERM; killing it");
        m_process->kill();
        m_stopStage = 3;
    }
}

void ClusterRunController::pause() {
    if (state() != State::Running) return;
    if (m_started) signalJob(SIGUSR1);  // every rank waits before its next step
    else m_pausePending = true;         // sent when the ranks can handle it
    setState(State::Paused);
}

void ClusterRunController::resume() {
    if (state() != State::Paused) return;
    if (m_started) signalJob(SIGUSR2);
    else m_pausePending = false;
    setState(State::Running);
}

void ClusterRunController::signalJob(int signal) {
    const qint64 pid = processId();
    if (pid > 0) ::kill(static_cast<pid_t>(pid), signal);
}

void ClusterRunController::readStdout() {
    if (!m_process) return;
    m_stdoutPartial += m_process->readAllStandardOutput();
    const qsizetype end = m_stdoutPartial.lastIndexOf('\n');
    if (end < 0) return;  // no whole line yet
    std::vector<std::string> lines;
    qsizetype from = 0;
    while (from <= end) {
        const qsizetype nl = m_stdoutPartial.indexOf('\n', from);
        lines.emplace_back(m_stdoutPartial.constData() + from, static_cast<size_t>(nl - from));
        from = nl + 1;
    }
    m_stdoutPartial.remove(0, end + 1);
    {
        std::lock_guard lock(m_shared->m_mutex);
        for (auto& line : lines) m_shared->lines.push_back(std::move(line));
    }
    m_shared->m_wake.notify_one();
}

void ClusterRunController::readStderr() {
    if (!m_process) return;
    m_stderrPartial += m_process->readAllStandardError();
    qsizetype nl;
    while ((nl = m_stderrPartial.indexOf('\n')) >= 0) {
        const QString line = QString::fromLocal8Bit(m_stderrPartial.left(nl)).trimmed();
        m_stderrPartial.remove(0, nl + 1);
        if (line.isEmpty()) continue;
        m_stderr << line;
        if (m_stderr.size() > kStderrLines) m_stderr.removeFirst();
    }
}

void ClusterRunController::onProcessFinished(int exitCode, QProcess::ExitStatus status) {
    m_exitCode = exitCode;
    m_exitStatus = status;
    m_stopTimer.stop();
    readStdout();
    readStderr();
    if (!m_stderrPartial.trimmed().isEmpty()) {
        m_stderr << QString::fromLocal8Bit(m_stderrPartial).trimmed();
        if (m_stderr.size() > kStderrLines) m_stderr.removeFirst();
    }
    m_stderrPartial.clear();
    closeInput();  // the decoder ends once the last lines are decoded: onDecoderFinished
}

void ClusterRunController::onProcessError(QProcess::ProcessError error) {
    if (error != QProcess::FailedToStart) return;  // the others end in finished()
    m_startError = m_process->errorString();
    closeInput();
}

void ClusterRunController::closeInput() {
    if (m_inputClosed || !m_shared) return;
    m_inputClosed = true;
    {
        std::lock_guard lock(m_shared->m_mutex);
        if (!m_stdoutPartial.isEmpty())  // a last line without its newline
            m_shared->lines.emplace_back(m_stdoutPartial.constData(), static_cast<size_t>(m_stdoutPartial.size()));
        m_shared->closed = true;
    }
    m_stdoutPartial.clear();
    m_shared->m_wake.notify_one();
}

void ClusterRunController::drain() {
    if (!m_shared) return;
    int64_t total = -1;
    std::vector<config::StepRecord> steps, deviceSteps;
    std::vector<config::Span> spans;
    std::vector<config::EvalResult> evals;
    {
        std::lock_guard lock(m_shared->m_mutex);
        std::swap(total, m_shared->total_steps);
        steps.swap(m_shared->steps);
        deviceSteps.swap(m_shared->device_steps);
        spans.swap(m_shared->spans);
        evals.swap(m_shared->evals);
    }
    if (total >= 0) {
        // Every rank has its signal handlers once rank 0 reports the start (the processes
        // agreed on the experiment inside the run): a Pause asked for earlier goes now.
        m_started = true;
        if (m_pausePending && state() == State::Paused) signalJob(SIGUSR1);
        m_pausePending = false;
        emit started(total);
    }
    if (!steps.empty()) {
        m_lastStep = steps.back().step;
        emit stepsArrived(QVector<config::StepRecord>(steps.begin(), steps.end()));
    }
    if (!deviceSteps.empty())
        emit deviceStepsArrived(QVector<config::StepRecord>(deviceSteps.begin(), deviceSteps.end()));
    if (!spans.empty()) emit spansArrived(QVector<config::Span>(spans.begin(), spans.end()));
    for (const auto& e : evals) emit evalArrived(e);
}

void ClusterRunController::onDecoderFinished() {
    m_drainTimer.stop();
    drain();  // the last steps and evaluations
    m_decoder->wait();
    delete m_decoder;
    m_decoder = nullptr;
    std::optional<config::RunSummary> summary;
    {
        std::lock_guard lock(m_shared->m_mutex);
        summary = m_shared->summary;
    }
    const QString failure = summary ? QString() : failureText();
    const bool stoppedEarly = !summary && !m_started && m_stopStage > 0 && m_startError.isEmpty();
    if (m_process) {
        m_process->disconnect(this);
        m_process->deleteLater();
        m_process = nullptr;
    }
    m_experimentFile.reset();
    m_stopTimer.stop();
    if (stoppedEarly) {
        // Stopped before any rank trained: the job had nothing to record but that.
        config::RunSummary s;
        s.status = "stopped";
        s.name = m_experimentName;
        s.strategy = m_strategy;
        for (const QString& d : m_settings.deviceNames()) s.devices.push_back(d.toStdString());
        setState(State::Stopped);
        emit finished(s);
        return;
    }
    if (!summary) {
        setState(State::Failed);
        emit failed(failure);
        return;
    }
    setState(summary->status == "finished" ? State::Finished
             : summary->status == "stopped" ? State::Stopped
                                            : State::Failed);
    emit finished(*summary);
}

QString ClusterRunController::failureText() const {
    if (!m_startError.isEmpty())
        return tr("Cannot start mpirun (%1): %2").arg(m_commandLine.value(0), m_startError);
    QString text = m_exitStatus == QProcess::CrashExit
                       ? tr("mpirun ended abnormally before the job reported its result")
                       : tr("The job ended without reporting its result (mpirun exit code %1)").arg(m_exitCode);
    if (m_stopStage >= 2) text += tr(", after Stop was not honoured within 10 s");
    {
        std::lock_guard lock(m_shared->m_mutex);
        if (!m_shared->decodeError.isEmpty()) text += tr("; a broken event line: %1").arg(m_shared->decodeError);
    }
    // ParaLab's own messages first (each process prints "paralab: [rank N: ]why"), then the
    // rest of what mpirun said.
    QStringList causes, rest;
    for (const QString& line : m_stderr) (line.startsWith(QLatin1String("paralab:")) ? causes : rest) << line;
    if (!causes.isEmpty()) text += QStringLiteral("\n") + causes.join(QLatin1Char('\n'));
    if (!rest.isEmpty())
        text += tr("\n\nmpirun's last output:\n%1").arg(rest.join(QLatin1Char('\n')));
    else if (causes.isEmpty())
        text += tr(" and printed nothing on stderr");
    return text;
}

}  // namespace paralab::ui
