#include "ui/session/runs_model.h"

#include "ui/panels/common/byte_units.h"

#include <QFile>
#include <QLocale>
#include <QCryptographicHash>
#include <QSaveFile>
#include <QSettings>
#include <QThread>

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/plan/compare.h"
#include "engine/plan/mesh.h"
#include "engine/util/error.h"
#include "engine/store/run_store.h"
#include "engine/strategy/registry.h"

namespace paralab::ui {

// How long the window's queries wait for a store another program holds.
constexpr int kWindowBusyTimeoutMs = 5000;

// Owns the store's connection; touched only on the worker thread.
class RunsModel::Worker : public QObject {
public:
    explicit Worker(std::string path) : m_path(std::move(path)) {}
    // Opened on first use and again after a failure, so that a store that was locked or
    // replaced is read afresh by the next refresh.
    store::RunStore& store() {
        if (!m_store) {
            m_store = std::make_unique<store::RunStore>(m_path);
            // A locked store comes back as a message within the window's patience.
            m_store->set_busy_timeout(kWindowBusyTimeoutMs);
        }
        return *m_store;
    }
    void forget() { m_store.reset(); }

private:
    std::string m_path;
    std::unique_ptr<store::RunStore> m_store;
};

namespace {

QString fromStd(const std::string& s) {
    return QString::fromStdString(s);
}

// The store's messages name the file and the cause; a locked database gets the plain reading.
QString storeMessage(const std::exception& e) {
    const QString what = QString::fromUtf8(e.what());
    if (what.contains(QLatin1String("locked")) || what.contains(QLatin1String("busy")))
        return RunsModel::tr(
                   "The run store is busy: another program holds a lock on it. Try again in a "
                   "moment. (%1)")
            .arg(what);
    return RunsModel::tr("Cannot read the run store: %1").arg(what);
}

double numberOr(const nlohmann::json& j, const char* key, double fallback) {
    if (!j.is_object()) return fallback;
    const auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// The stored strategy section as the registry reads it: the options this build knows, with
// their stored values where the types agree (an older store's are left at their defaults).
config::StrategyConfig strategyConfig(const std::string& type, const nlohmann::json& section) {
    config::StrategyConfig s;
    s.type = type;
    const strategy::StrategyDescriptor* d = strategy::find_strategy(type);
    if (!d) return s;
    for (const config::OptionSpec& spec : d->options) {
        const auto it = section.find(spec.key);
        if (it == section.end()) continue;
        if (std::holds_alternative<bool>(spec.fallback) && it->is_boolean())
            s.options[spec.key] = it->get<bool>();
        else if (std::holds_alternative<int64_t>(spec.fallback) && it->is_number_integer())
            s.options[spec.key] = it->get<int64_t>();
        else if (std::holds_alternative<double>(spec.fallback) && it->is_number())
            s.options[spec.key] = it->get<double>();
        else if (std::holds_alternative<std::string>(spec.fallback) && it->is_string())
            s.options[spec.key] = it->get<std::string>();
    }
    return s;
}

RunInfo toInfo(const store::RunRow& r) {
    RunInfo info;
    info.id = r.run_id;
    info.name = fromStd(r.name);
    info.strategy = fromStd(r.strategy);
    info.status = fromStd(r.status);
    info.notes = fromStd(r.notes);
    info.author = fromStd(r.author);
    if (!r.config.is_null()) info.config = QByteArray::fromStdString(r.config.dump());
    for (const auto& d : r.devices) info.devices << fromStd(d);
    info.createdAt = QDateTime::fromString(fromStd(r.created_at), Qt::ISODate);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    info.finalLoss = numberOr(r.summary, "final_loss", nan);
    info.testAccuracy = numberOr(r.summary, "test_accuracy", nan);
    info.samplesPerS = numberOr(r.summary, "samples_per_s", 0.0);
    if (r.summary.is_object()) {
        if (auto it = r.summary.find("error"); it != r.summary.end() && it->is_string())
            info.error = fromStd(it->get<std::string>());
        if (auto it = r.summary.find("peak_memory_bytes"); it != r.summary.end() && it->is_object())
            for (const auto& [device, bytes] : it->items())
                if (bytes.is_number())
                    info.peakMemoryBytes = std::max(info.peakMemoryBytes, bytes.get<qint64>());
    }
    if (r.config.is_object()) {
        // nlohmann's objects are ordered by key: the same sections dump to the same text.
        nlohmann::json identity = nlohmann::json::object();
        for (const char* section : {"model", "data"})
            if (auto it = r.config.find(section); it != r.config.end()) identity[section] = *it;
        info.experimentKey = fromStd(identity.dump());
        if (auto it = r.config.find("strategy"); it != r.config.end() && it->is_object())
            info.variant = fromStd(strategy::variant_label(strategyConfig(r.strategy, *it)));
    }
    return info;
}

// Runs without a summary (still going, or interrupted): throughput and memory as far as the
// recorded steps go.
void fillFromSteps(store::RunStore& db, RunInfo& info) {
    qint64 samples = 0;
    double wall = 0;
    for (const auto& d : db.device_stats(info.id)) {
        samples += d.samples;
        wall = std::max(wall, d.wall_s);
        info.peakMemoryBytes = std::max<qint64>(info.peakMemoryBytes, d.max_memory_bytes);
    }
    // A step's samples are counted once per device that consumed them, as the summary's
    // samples/s counts the global batch: pipeline stages and model-parallel ranks see the same
    // rows, so this is an upper bound there; the summary replaces it when the run ends.
    info.samplesPerS = wall > 0 ? static_cast<double>(samples) / wall : 0;
    info.fromSteps = true;
}

QVector<RunInfo> loadRuns(store::RunStore& db) {
    QVector<RunInfo> runs;
    for (const auto& row : db.list_runs()) {
        RunInfo info = toInfo(row);
        if (row.summary.is_null()) fillFromSteps(db, info);
        runs.push_back(std::move(info));
    }
    return runs;
}

QString devicesText(const QStringList& devices) {
    if (devices.isEmpty()) return {};
    // "4 × cpu" when every device is of one kind; the names otherwise.
    const QString kind = devices.front().section(QLatin1Char(':'), 0, 0);
    const bool oneKind = std::all_of(devices.begin(), devices.end(), [&](const QString& d) {
        return d.section(QLatin1Char(':'), 0, 0) == kind;
    });
    if (devices.size() == 1) return devices.front();
    if (oneKind) return QStringLiteral("%1 × %2").arg(devices.size()).arg(kind);
    return devices.join(QLatin1String(", "));
}

QByteArray csvField(const QString& s) {
    QByteArray bytes = s.toUtf8();
    if (!bytes.contains(',') && !bytes.contains('"') && !bytes.contains('\n') &&
        !bytes.contains('\r'))
        return bytes;
    bytes.replace("\"", "\"\"");
    return '"' + bytes + '"';
}

QByteArray csvNumber(double v) {
    return std::isfinite(v) ? QByteArray::number(v, 'g', 9) : QByteArray();
}

}  // namespace

bool RunInfo::resumable() const {
    return status == QLatin1String("stopped") || status == QLatin1String("interrupted") ||
           status == QLatin1String("failed");
}

QString RunInfo::strategyLabel() const {
    return variant.isEmpty() ? strategy : strategy + QStringLiteral(" · ") + variant;
}

std::optional<ScalingEfficiency> scalingEfficiency(const RunInfo& run,
                                                   const QVector<RunInfo>& runs, qint64 chosen) {
    if (run.samplesPerS <= 0 || run.devices.isEmpty()) return std::nullopt;
    auto isBaseline = [](const RunInfo& r) { return strategy::is_baseline(r.strategy.toStdString()); };
    auto candidate = [&](const RunInfo& c) {
        return c.devices.size() == 1 && c.status == QLatin1String("finished") && c.samplesPerS > 0 &&
               !run.experimentKey.isEmpty() && c.experimentKey == run.experimentKey;
    };
    const RunInfo* best = nullptr;
    for (const RunInfo& c : runs)
        if (c.id == chosen && candidate(c)) best = &c;
    if (!best && run.devices.size() == 1 && isBaseline(run))
        return ScalingEfficiency{run.id, run.samplesPerS, 1.0};
    if (!best) {
        // the baseline strategy beats a one-device hogwild; newest wins
        auto rank = [&](const RunInfo& c) { return std::pair(isBaseline(c), c.id); };
        for (const RunInfo& c : runs)
            if (c.id != run.id && candidate(c) && (!best || rank(c) > rank(*best))) best = &c;
    }
    if (!best) return std::nullopt;
    return ScalingEfficiency{
        best->id, best->samplesPerS,
        run.samplesPerS / (static_cast<double>(run.devices.size()) * best->samplesPerS)};
}

namespace {

QString baselineSettingsKey(const QString& experimentKey) {
    return QStringLiteral("runs/baselines/") +
           QString::fromLatin1(
               QCryptographicHash::hash(experimentKey.toUtf8(), QCryptographicHash::Sha1).toHex());
}

}  // namespace

qint64 RunsModel::chosenBaseline(const QString& experimentKey) const {
    if (experimentKey.isEmpty()) return 0;
    return QSettings().value(baselineSettingsKey(experimentKey), 0).toLongLong();
}

bool RunsModel::chooseBaseline(qint64 runId) {
    const RunInfo* r = run(runId);
    if (!r || r->devices.size() != 1 || r->status != QLatin1String("finished") || r->samplesPerS <= 0 ||
        r->experimentKey.isEmpty())
        return false;
    QSettings().setValue(baselineSettingsKey(r->experimentKey), runId);
    // Every run of the experiment is measured against it: the efficiency is not a column, but
    // views that show it redraw on a reset.
    beginResetModel();
    endResetModel();
    return true;
}

RunsModel::RunsModel(QString storePath, QObject* parent)
    : QAbstractTableModel(parent),
      m_storePath(storePath.isEmpty() ? fromStd(store::RunStore::default_path())
                                      : std::move(storePath)),
      m_thread(new QThread(this)),
      m_worker(new Worker(m_storePath.toStdString())) {
    qRegisterMetaType<paralab::ui::LossCurve>();
    m_thread->setObjectName(QStringLiteral("ParaLab run store"));
    m_worker->moveToThread(m_thread);
    connect(m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    m_thread->start();
    refresh();
}

RunsModel::~RunsModel() {
    // Behind the jobs already queued: a note typed just before the window closes is written.
    QMetaObject::invokeMethod(
        m_worker, [thread = m_thread] { thread->quit(); }, Qt::QueuedConnection);
    // A query waits at most SQLite's busy timeout (5 s); a wedged one would block here forever.
    // Past the limit the thread (and the worker on it) is left behind rather than destroyed
    // while it runs.
    if (!m_thread->wait(10000)) {
        qWarning("ParaLab: the run store query did not end within 10 s");
        m_thread->setParent(nullptr);
    }
}

void RunsModel::post(std::function<void(Worker&)> job) {
    QMetaObject::invokeMethod(
        m_worker, [w = m_worker, job = std::move(job)] { job(*w); }, Qt::QueuedConnection);
}

void RunsModel::refresh() {
    if (m_refreshInFlight) {
        m_refreshAgain = true;
        return;
    }
    m_refreshInFlight = true;
    post([this](Worker& w) {
        QVector<RunInfo> runs;
        QString error;
        try {
            runs = loadRuns(w.store());
        } catch (const std::exception& e) {
            w.forget();
            error = storeMessage(e);
        }
        // Queued to the model: dropped by Qt if the model is gone by then.
        QMetaObject::invokeMethod(
            this,
            [this, runs = std::move(runs), error]() mutable { applyRuns(std::move(runs), error); },
            Qt::QueuedConnection);
    });
}

void RunsModel::applyRuns(QVector<RunInfo> runs, const QString& error) {
    m_refreshInFlight = false;
    beginResetModel();
    m_runs = std::move(runs);
    endResetModel();
    if (error != m_error) {
        m_error = error;
        emit errorChanged(m_error);
    }
    emit refreshed();
    if (m_refreshAgain) {
        m_refreshAgain = false;
        refresh();
    }
}

void RunsModel::deleteRuns(const QList<qint64>& ids) {
    QList<qint64> deletable;
    QStringList running;
    for (qint64 id : ids) {
        const RunInfo* r = run(id);
        if (r && r->status == QLatin1String("running"))
            running << QStringLiteral("#%1").arg(id);
        else
            deletable << id;
    }
    if (!running.isEmpty())
        emit operationFailed(tr("Run %1 is still being recorded: stop it before deleting it.")
                                 .arg(running.join(QLatin1String(", "))));
    if (deletable.isEmpty()) return;
    m_refreshInFlight = true;  // the job reloads the runs; a refresh asked meanwhile follows it
    post([this, deletable](Worker& w) {
        QVector<RunInfo> runs;
        QString loadError, deleteError;
        QList<qint64> deleted;
        try {
            auto& db = w.store();
            for (qint64 id : deletable)
                if (db.delete_run(id)) deleted << id;
        } catch (const std::exception& e) {
            deleteError = storeMessage(e);
        }
        try {
            runs = loadRuns(w.store());
        } catch (const std::exception& e) {
            w.forget();
            loadError = storeMessage(e);
        }
        QMetaObject::invokeMethod(
            this,
            [this, runs = std::move(runs), loadError, deleteError, deleted]() mutable {
                applyRuns(std::move(runs), loadError);
                if (!deleteError.isEmpty()) emit operationFailed(deleteError);
                if (!deleted.isEmpty()) emit runsDeleted(deleted);
            },
            Qt::QueuedConnection);
    });
}

quint64 RunsModel::loadCurves(const QList<qint64>& ids) {
    const quint64 request = ++m_curveRequest;
    post([this, ids, request](Worker& w) {
        QVector<LossCurve> curves;
        QString error;
        try {
            auto& db = w.store();
            for (qint64 id : ids) {
                LossCurve c;
                c.runId = id;
                for (const auto& p : db.loss_curve(id)) {
                    c.steps << static_cast<double>(p.step);
                    c.wallS << p.wall_s;
                    c.loss << p.loss;
                }
                curves << std::move(c);
            }
        } catch (const std::exception& e) {
            w.forget();
            error = storeMessage(e);
        }
        QMetaObject::invokeMethod(
            this,
            [this, request, curves = std::move(curves), error] {
                if (!error.isEmpty()) emit operationFailed(error);
                emit curvesLoaded(request, curves);
            },
            Qt::QueuedConnection);
    });
    return request;
}

void RunsModel::writeFile(const QString& path, const QByteArray& bytes) {
    post([this, path, bytes](Worker&) {
        QSaveFile file(path);  // all or nothing: a failed export leaves no half file
        QString error;
        if (!file.open(QIODevice::WriteOnly) || file.write(bytes) != bytes.size() || !file.commit())
            error = tr("Could not write %1: %2").arg(path, file.errorString());
        QMetaObject::invokeMethod(
            this,
            [this, path, error] {
                if (!error.isEmpty()) emit operationFailed(error);
                emit fileWritten(path, error);
            },
            Qt::QueuedConnection);
    });
}

void RunsModel::comparePlan(qint64 id) {
    post([this, id](Worker& w) {
        PlanBesideRun c;
        QString error;
        try {
            const auto row = w.store().get_run(id);
            if (!row) throw Error("run " + std::to_string(id) + " is not in the store");
            if (row->status == "running")
                throw Error("run " + std::to_string(id) + " is still running: compare a run that has ended");
            std::vector<double> ends;
            for (const auto& point : w.store().loss_curve(id)) ends.push_back(point.wall_s);
            const plan::RunComparison r =
                plan::compare_run(row->config, row->summary, ends, "run " + std::to_string(id));
            c.cluster = fromStd(r.cluster);
            c.mesh = fromStd(plan::mesh_line(r.predicted.mesh, r.predicted.micro_batch));
            c.stepFrom = fromStd(r.step_from);
            c.predictedStep = r.predicted.step_time_s;
            c.measuredStep = r.step_s;
            c.stepError = r.time_error;
            c.predictedRate = r.predicted.samples_per_s;
            c.measuredRate = r.samples_per_s;
            c.rateError = r.rate_error;
            c.predictedPeak = r.predicted_peak_bytes;
            c.measuredPeak = r.peak_bytes;
            c.memoryError = r.memory_error;
        } catch (const std::exception& e) {
            error = tr("Cannot plan run %1: %2").arg(id).arg(QString::fromUtf8(e.what()));
        }
        QMetaObject::invokeMethod(
            this, [this, id, c, error] { emit planCompared(id, c, error); }, Qt::QueuedConnection);
    });
}

void RunsModel::exportRuns(const QList<qint64>& ids, const QString& path) {
    post([this, ids, path](Worker& w) {
        QString error;
        int count = 0;
        try {
            const std::vector<int64_t> wanted(ids.begin(), ids.end());
            count = static_cast<int>(w.store().export_runs(wanted, path.toStdString()).size());
        } catch (const std::exception& e) {
            error = tr("Could not export the runs: %1").arg(QString::fromUtf8(e.what()));
        }
        QMetaObject::invokeMethod(
            this,
            [this, path, count, error] {
                if (!error.isEmpty()) emit operationFailed(error);
                emit runsExported(path, count, error);
            },
            Qt::QueuedConnection);
    });
}

void RunsModel::importRuns(const QString& path) {
    m_refreshInFlight = true;  // the job reloads the runs
    post([this, path](Worker& w) {
        QString error, loadError;
        QList<qint64> added;
        QVector<RunInfo> runs;
        try {
            for (int64_t id : w.store().import_runs(path.toStdString())) added << id;
        } catch (const std::exception& e) {
            error = tr("Could not import the runs: %1").arg(QString::fromUtf8(e.what()));
        }
        try {
            runs = loadRuns(w.store());
        } catch (const std::exception& e) {
            w.forget();
            loadError = storeMessage(e);
        }
        QMetaObject::invokeMethod(
            this,
            [this, path, added, error, loadError, runs = std::move(runs)]() mutable {
                applyRuns(std::move(runs), loadError);
                if (!error.isEmpty()) emit operationFailed(error);
                emit runsImported(path, added, error);
            },
            Qt::QueuedConnection);
    });
}

int RunsModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int RunsModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
        case Name:
            return tr("Name");
        case Strategy:
            return tr("Strategy");
        case Devices:
            return tr("Devices");
        case Status:
            return tr("Status");
        case FinalLoss:
            return tr("Final loss");
        case TestAccuracy:
            return tr("Test accuracy");
        case SamplesPerS:
            return tr("Samples/s");
        case PeakMemory:
            return tr("Peak memory");
        case Date:
            return tr("Date");
        case Author:
            return tr("Author");
        case Notes:
            return tr("Notes");
        default:
            return {};
    }
}

QVariant RunsModel::data(const QModelIndex& index, int role) const {
    if (!index.isValid() || index.row() >= m_runs.size()) return {};
    const RunInfo& r = m_runs[index.row()];
    if (role == RunIdRole) return r.id;
    if (role == StrategyRole) return r.strategy;
    if (role == Qt::TextAlignmentRole) {
        const bool number = index.column() >= FinalLoss && index.column() <= PeakMemory;
        return QVariant::fromValue(Qt::Alignment(number ? Qt::AlignRight | Qt::AlignVCenter
                                                        : Qt::AlignLeft | Qt::AlignVCenter));
    }
    if (role == SortRole) {
        switch (index.column()) {
            case Devices:
                return static_cast<int>(r.devices.size());
            case FinalLoss:
                return std::isfinite(r.finalLoss) ? r.finalLoss : 1e300;  // unknown last
            case TestAccuracy:
                return std::isfinite(r.testAccuracy) ? r.testAccuracy : -1.0;
            case SamplesPerS:
                return r.samplesPerS;
            case PeakMemory:
                return r.peakMemoryBytes;
            case Date:
                return r.id;  // the store's order: created_at has one-second resolution
            default:
                return data(index, Qt::DisplayRole).toString().toLower();
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (index.column()) {
            case Devices:
                return r.devices.join(QLatin1String(", "));
            case Status:
                return r.error.isEmpty() ? QVariant() : r.error;
            case SamplesPerS:
            case PeakMemory:
                return r.fromSteps ? tr("from the steps recorded so far (the run has no summary)")
                                   : QVariant();
            case Notes:
                return r.notes.isEmpty() ? tr("Double-click to write a note") : r.notes;
            default:
                return {};
        }
    }
    if (role == Qt::EditRole && index.column() == Notes) return r.notes;
    if (role != Qt::DisplayRole) return {};
    const QLocale locale;
    switch (index.column()) {
        case Name:
            return QStringLiteral("%1  #%2").arg(r.name).arg(r.id);
        case Strategy:
            return r.strategyLabel();
        case Devices:
            return devicesText(r.devices);
        case Status:
            return r.status;
        case FinalLoss:
            return std::isfinite(r.finalLoss) ? locale.toString(r.finalLoss, 'f', 4) : QString();
        case TestAccuracy:
            return std::isfinite(r.testAccuracy)
                       ? QStringLiteral("%1 %").arg(locale.toString(100 * r.testAccuracy, 'f', 1))
                       : QString();
        case SamplesPerS:
            return r.samplesPerS > 0 ? locale.toString(r.samplesPerS, 'f', 0) : QString();
        case PeakMemory:
            return r.peakMemoryBytes > 0 ? formatBytes(r.peakMemoryBytes) : QString();
        case Date:
            return r.createdAt.isValid()
                       ? r.createdAt.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm"))
                       : QString();
        case Author:
            return r.author;
        case Notes:
            return r.notes;
        default:
            return {};
    }
}

Qt::ItemFlags RunsModel::flags(const QModelIndex& index) const {
    Qt::ItemFlags f = QAbstractTableModel::flags(index);
    if (index.isValid() && index.column() == Notes) f |= Qt::ItemIsEditable;
    return f;
}

bool RunsModel::setData(const QModelIndex& index, const QVariant& value, int role) {
    if (!index.isValid() || index.column() != Notes || role != Qt::EditRole ||
        index.row() >= m_runs.size())
        return false;
    RunInfo& r = m_runs[index.row()];
    const QString notes = value.toString();
    if (notes == r.notes) return true;
    const QString previous = r.notes;
    r.notes = notes;
    emit dataChanged(index, index);
    const qint64 id = r.id;
    post([this, id, notes, previous](Worker& w) {
        QString error;
        try {
            if (!w.store().set_notes(id, notes.toStdString()))
                error = tr("Run #%1 is no longer in the store; its note was not saved.").arg(id);
        } catch (const std::exception& e) {
            w.forget();
            error = storeMessage(e);
        }
        QMetaObject::invokeMethod(
            this,
            [this, id, notes, previous, error] {
                if (error.isEmpty()) {
                    emit notesSaved(id);
                    return;
                }
                // Not saved: show what the store holds, unless the user has typed again since.
                const int row = rowOfRun(id);
                if (row >= 0 && m_runs[row].notes == notes) {
                    m_runs[row].notes = previous;
                    emit dataChanged(this->index(row, Notes), this->index(row, Notes));
                }
                emit operationFailed(error);
            },
            Qt::QueuedConnection);
    });
    return true;
}

int RunsModel::rowOfRun(qint64 id) const {
    for (int i = 0; i < m_runs.size(); ++i)
        if (m_runs[i].id == id) return i;
    return -1;
}

const RunInfo* RunsModel::run(qint64 id) const {
    const int row = rowOfRun(id);
    return row < 0 ? nullptr : &m_runs[row];
}

std::optional<ScalingEfficiency> RunsModel::scalingEfficiency(qint64 runId) const {
    const RunInfo* r = run(runId);
    return r ? paralab::ui::scalingEfficiency(*r, m_runs, chosenBaseline(r->experimentKey)) : std::nullopt;
}

QByteArray RunsModel::csv(const QList<int>& rows) const {
    QByteArray out =
        "run_id,name,strategy,variant,devices,status,final_loss,test_accuracy,samples_per_s,"
        "peak_memory_bytes,created_at,author,notes\n";
    for (int row : rows) {
        if (row < 0 || row >= m_runs.size()) continue;
        const RunInfo& r = m_runs[row];
        out += QByteArray::number(r.id) + ',' + csvField(r.name) + ',' + csvField(r.strategy) +
               ',' + csvField(r.variant) + ',' + csvField(r.devices.join(QLatin1Char(' '))) + ',' + csvField(r.status) + ',' +
               csvNumber(r.finalLoss) + ',' + csvNumber(r.testAccuracy) + ',' +
               (r.samplesPerS > 0 ? csvNumber(r.samplesPerS) : QByteArray()) + ',' +
               (r.peakMemoryBytes > 0 ? QByteArray::number(r.peakMemoryBytes) : QByteArray()) +
               ',' + csvField(r.createdAt.toString(Qt::ISODate)) + ',' + csvField(r.author) + ',' +
               csvField(r.notes) + '\n';
    }
    return out;
}

}  // namespace paralab::ui
