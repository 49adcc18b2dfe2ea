// The run store's runs as a table for the window (docs/design.md, "Layers", ui/session: QtCore only).
// Every store query runs on a worker thread of the model's own, one at a time and in the order
// asked (a notes edit is written before the refresh that follows it); results come back to
// the GUI thread as queued calls. The GUI thread never opens the database: a locked store
// (SQLite waits up to 5 s) or a damaged file stalls the worker, never the window, and comes
// back as a message.
#pragma once

#include <QAbstractTableModel>
#include <QDateTime>
#include <QStringList>
#include <QVector>

#include <functional>
#include <limits>
#include <optional>

class QThread;

namespace paralab::ui {

// One run as the table shows it. Numbers that are unknown (a run still going, a regression
// without accuracy) are NaN or 0.
struct RunInfo {
    qint64 id = 0;
    QString name, strategy, status, notes;
    QString variant;  // what tells it from other runs of its strategy: "stage 2" (registry)
    QString author;   // who ran it (the store's; "" in stores from before authors)
    QByteArray config;  // the experiment it ran, as stored (JSON): what Resume runs again

    // Stopped, interrupted or failed: Resume may continue it from its last checkpoint.
    bool resumable() const;
    QString error;  // why a failed run failed
    QStringList devices;
    QDateTime createdAt;  // UTC
    double finalLoss = std::numeric_limits<double>::quiet_NaN();
    double testAccuracy = std::numeric_limits<double>::quiet_NaN();
    double samplesPerS = 0;
    qint64 peakMemoryBytes = 0;  // the largest peak over the run's devices
    // The experiment's identity for comparisons: its model and data sections (the batch
    // included) as canonical JSON; the name, devices and strategy are not part of it.
    QString experimentKey;
    bool fromSteps = false;      // no summary yet: throughput and memory from the recorded steps

    // "zero · stage 2": the strategy and its variant.
    QString strategyLabel() const;
};

// A run's training loss per step over all its devices (NaN where no device computed a loss).
struct LossCurve {
    qint64 runId = 0;
    QVector<double> steps, wallS, loss;
};

// samples/s of `run` over N devices against N × the samples/s of a single-device run of the
// the same experiment (experimentKey).
struct ScalingEfficiency {
    qint64 baselineRunId = 0;
    double baselineSamplesPerS = 0;
    double value = 0;  // 1.0: perfect scaling
};
// The baseline is `chosen` when it is a finished single-device run of `run`'s experiment,
// else the newest such run of the baseline strategy (the registry's, single), else the newest
// such run of any strategy; a single-device run of the baseline strategy is its own baseline
// unless another was chosen. Empty when there is none or `run` has no throughput.
std::optional<ScalingEfficiency> scalingEfficiency(const RunInfo& run,
                                                   const QVector<RunInfo>& runs,
                                                   qint64 chosen = 0);

// A stored run beside its plan (RunsModel::comparePlan): predicted and measured step time,
// samples/s and the busiest device's peak memory, and the relative errors ((predicted −
// measured) / measured; NaN without a measurement).
struct PlanBesideRun {
    QString cluster, mesh, stepFrom;
    double predictedStep = 0, measuredStep = 0, stepError = 0;
    double predictedRate = 0, measuredRate = 0, rateError = 0;
    double predictedPeak = 0, measuredPeak = 0, memoryError = 0;
};

class RunsModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column {
        Name,
        Strategy,
        Devices,
        Status,
        FinalLoss,
        TestAccuracy,
        SamplesPerS,
        PeakMemory,
        Date,
        Author,
        Notes,
        ColumnCount
    };
    // Raw values (numbers, dates) for sorting; the run's id.
    static constexpr int SortRole = Qt::UserRole;
    static constexpr int RunIdRole = Qt::UserRole + 1;
    static constexpr int StrategyRole = Qt::UserRole + 2;  // the strategy's name: its colour

    // The store at `storePath` (the default store when empty). Loads the runs at once, on the
    // worker thread.
    explicit RunsModel(QString storePath = {}, QObject* parent = nullptr);
    ~RunsModel() override;  // waits for the query in flight (with a time limit)

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation,
                        int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    // Notes only: shown at once, written to the store on the worker (notesSaved, or
    // operationFailed and the old text back).
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

    QString storePath() const { return m_storePath; }
    const QVector<RunInfo>& runs() const { return m_runs; }
    int rowOfRun(qint64 id) const;  // -1 when not listed
    const RunInfo* run(qint64 id) const;
    // Against every run in the store, not only those shown, and the baseline chosen for the
    // run's experiment.
    std::optional<ScalingEfficiency> scalingEfficiency(qint64 runId) const;
    // Makes the finished single-device run `runId` the scaling baseline of its experiment (kept
    // in the settings, per experiment); false, and nothing changed, for any other run.
    bool chooseBaseline(qint64 runId);
    // The run chosen for `experimentKey`'s experiment, 0 when none was.
    qint64 chosenBaseline(const QString& experimentKey) const;
    // Why the runs could not be read ("" after a successful refresh).
    QString errorMessage() const { return m_error; }
    bool isRefreshing() const { return m_refreshInFlight; }

    // The given source rows as CSV (header + one line per run; raw numbers, ISO dates).
    QByteArray csv(const QList<int>& rows) const;

public slots:
    void refresh();
    // Runs still being recorded are refused (operationFailed); the others are deleted with their
    // records, evaluations and spans, then the table is reloaded.
    void deleteRuns(const QList<qint64>& ids);
    // Answered by curvesLoaded with the returned request number; a newer request makes older
    // answers stale (the caller compares).
    quint64 loadCurves(const QList<qint64>& ids);
    // Writes `bytes` to `path` on the worker: fileWritten(path, "" or why not).
    void writeFile(const QString& path, const QByteArray& bytes);
    // Hand-in: runs `ids` whole into a new store file at `path` (RunStore::export_runs):
    // runsExported(path, how many, "" or why not).
    void exportRuns(const QList<qint64>& ids, const QString& path);
    // Every run of the store at `path` copied into this one, then the table reloaded:
    // runsImported(path, the new ids, "" or why not).
    void importRuns(const QString& path);
    // The run's experiment planned on this machine's `local` cluster beside what the run
    // measured (plan::compare_run), read on the worker: planCompared(id, comparison, "" or why
    // not).
    void comparePlan(qint64 id);

signals:
    void refreshed();                              // after every refresh, also a failed one
    void errorChanged(const QString& message);     // the load error; "" when it is gone
    void operationFailed(const QString& message);  // notes, delete, curves, export
    void notesSaved(qint64 runId);
    void runsDeleted(const QList<qint64>& ids);
    void curvesLoaded(quint64 request, const QVector<paralab::ui::LossCurve>& curves);
    void fileWritten(const QString& path, const QString& error);
    void runsExported(const QString& path, int count, const QString& error);
    void runsImported(const QString& path, const QList<qint64>& ids, const QString& error);
    void planCompared(qint64 id, const paralab::ui::PlanBesideRun& comparison, const QString& error);

private:
    class Worker;
    // Runs `job` on the worker thread (queued behind the jobs before it).
    void post(std::function<void(Worker&)> job);
    void applyRuns(QVector<RunInfo> runs, const QString& error);

    QString m_storePath;
    QThread* m_thread;
    Worker* m_worker;  // lives on m_thread; deleted there when the thread ends
    QVector<RunInfo> m_runs;
    QString m_error;
    bool m_refreshInFlight = false;
    bool m_refreshAgain = false;  // a refresh was asked for while one was in flight
    quint64 m_curveRequest = 0;
};

}  // namespace paralab::ui

Q_DECLARE_METATYPE(paralab::ui::LossCurve)
Q_DECLARE_METATYPE(paralab::ui::PlanBesideRun)
