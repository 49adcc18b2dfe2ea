#include "ui/session/cluster_settings.h"

#include <QFile>
#include <QFileInfo>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QSysInfo>
#include <QTextStream>

#include <unistd.h>

#include <algorithm>

namespace paralab::ui {

namespace {
const QString kGroup = QStringLiteral("cluster");

// A host name mpirun's --host accepts: letters, digits, '.', '-', '_' (no spaces, commas or
// colons, which separate hosts and slots).
bool validHostName(const QString& name) {
    static const QRegularExpression re(QStringLiteral("^[A-Za-z0-9._-]+$"));
    return re.match(name).hasMatch();
}

bool isLocalHost(const QString& name) {
    return name == QLatin1String("localhost") || name.startsWith(QLatin1String("127.")) ||
           name.compare(QSysInfo::machineHostName(), Qt::CaseInsensitive) == 0;
}
}  // namespace

void ClusterSettings::save(QSettings& settings) const {
    settings.beginGroup(kGroup);
    settings.setValue(QStringLiteral("enabled"), enabled);
    settings.setValue(QStringLiteral("useHostfile"), useHostfile);
    settings.beginWriteArray(QStringLiteral("hosts"), static_cast<int>(hosts.size()));
    for (int i = 0; i < hosts.size(); ++i) {
        settings.setArrayIndex(i);
        settings.setValue(QStringLiteral("name"), hosts[i].name);
        settings.setValue(QStringLiteral("slots"), hosts[i].slotCount);
    }
    settings.endArray();
    settings.setValue(QStringLiteral("hostfile"), hostfile);
    settings.setValue(QStringLiteral("processes"), processes);
    settings.setValue(QStringLiteral("devicesPerProcess"), devicesPerProcess);
    settings.setValue(QStringLiteral("oversubscribe"), oversubscribe);
    settings.setValue(QStringLiteral("mpirun"), mpirun);
    settings.setValue(QStringLiteral("sharedDir"), sharedDir);
    settings.endGroup();
}

ClusterSettings ClusterSettings::load(QSettings& settings) {
    ClusterSettings s;
    settings.beginGroup(kGroup);
    if (!settings.contains(QStringLiteral("enabled"))) {  // never saved: the defaults
        settings.endGroup();
        return s;
    }
    s.enabled = settings.value(QStringLiteral("enabled")).toBool();
    s.useHostfile = settings.value(QStringLiteral("useHostfile")).toBool();
    const int n = settings.beginReadArray(QStringLiteral("hosts"));
    s.hosts.clear();
    for (int i = 0; i < n; ++i) {
        settings.setArrayIndex(i);
        s.hosts.push_back({settings.value(QStringLiteral("name")).toString(),
                           settings.value(QStringLiteral("slots"), 1).toInt()});
    }
    settings.endArray();
    s.hostfile = settings.value(QStringLiteral("hostfile")).toString();
    s.processes = settings.value(QStringLiteral("processes"), 0).toInt();
    s.devicesPerProcess = settings.value(QStringLiteral("devicesPerProcess"), 1).toInt();
    s.oversubscribe = settings.value(QStringLiteral("oversubscribe")).toBool();
    s.mpirun = settings.value(QStringLiteral("mpirun")).toString();
    s.sharedDir = settings.value(QStringLiteral("sharedDir")).toString();
    settings.endGroup();
    return s;
}

QVector<ClusterHost> ClusterSettings::jobHosts(QString* error) const {
    if (!useHostfile) return hosts;
    if (hostfile.isEmpty()) {
        if (error) *error = QStringLiteral("choose a hostfile");
        return {};
    }
    QFile file(hostfile);
    if (!file.open(QIODevice::ReadOnly | QIODevice::Text)) {
        if (error) *error = QStringLiteral("%1: cannot read the hostfile: %2").arg(hostfile, file.errorString());
        return {};
    }
    QVector<ClusterHost> out;
    QTextStream in(&file);
    int lineNo = 0;
    while (!in.atEnd()) {
        ++lineNo;
        const QString line = in.readLine().section(QLatin1Char('#'), 0, 0).simplified();
        if (line.isEmpty()) continue;
        const QStringList words = line.split(QLatin1Char(' '));
        ClusterHost host{words[0], 1};
        for (int i = 1; i < words.size(); ++i) {
            if (!words[i].startsWith(QLatin1String("slots="))) continue;  // max_slots=... and others
            bool ok = false;
            host.slotCount = words[i].mid(6).toInt(&ok);
            if (!ok || host.slotCount < 1) {
                if (error)
                    *error = QStringLiteral("%1 line %2: slots must be a whole number of at least 1, not '%3'")
                                 .arg(hostfile)
                                 .arg(lineNo)
                                 .arg(words[i].mid(6));
                return {};
            }
        }
        out.push_back(host);
    }
    if (out.isEmpty() && error) *error = QStringLiteral("%1: the hostfile names no host").arg(hostfile);
    return out;
}

int ClusterSettings::slotCount() const {
    int n = 0;
    for (const auto& h : jobHosts()) n += std::max(0, h.slotCount);
    return n;
}

int ClusterSettings::processCount() const { return processes > 0 ? processes : slotCount(); }

bool ClusterSettings::allLocal() const {
    const auto all = jobHosts();
    if (all.isEmpty()) return false;
    for (const auto& h : all)
        if (!isLocalHost(h.name)) return false;
    return true;
}

QString ClusterSettings::resolvedMpirun(QString* error) const {
    if (!mpirun.isEmpty()) {
        const QFileInfo info(mpirun);
        if (info.isFile() && info.isExecutable()) return info.absoluteFilePath();
        if (error)
            *error = info.exists() ? QStringLiteral("%1 is not an executable program").arg(mpirun)
                                   : QStringLiteral("%1 does not exist").arg(mpirun);
        return {};
    }
    const QString found = QStandardPaths::findExecutable(QStringLiteral("mpirun"));
    if (found.isEmpty() && error)
        *error = QStringLiteral("mpirun is not on PATH: install Open MPI (openmpi-bin) or give mpirun's path");
    return found;
}

QMap<QString, QString> ClusterSettings::problems() const {
    QMap<QString, QString> out;
    if (useHostfile) {
        QString error;
        if (jobHosts(&error).isEmpty()) out[QStringLiteral("hostfile")] = error;
    } else if (hosts.isEmpty()) {
        out[QStringLiteral("hosts")] = QStringLiteral("add at least one host");
    } else {
        for (int i = 0; i < hosts.size(); ++i) {
            const auto& h = hosts[i];
            QString message;
            if (h.name.trimmed().isEmpty())
                message = QStringLiteral("row %1: the host name is empty").arg(i + 1);
            else if (!validHostName(h.name))
                message = QStringLiteral("row %1: '%2' is not a host name (letters, digits, '.', '-', '_')")
                              .arg(i + 1)
                              .arg(h.name);
            else if (h.slotCount < 1)
                message = QStringLiteral("row %1 (%2): slots must be at least 1, not %3").arg(i + 1).arg(h.name).arg(h.slotCount);
            if (!message.isEmpty()) {
                out[QStringLiteral("hosts")] = message;
                break;
            }
        }
    }
    if (devicesPerProcess < 1 || devicesPerProcess > 64)
        out[QStringLiteral("devicesPerProcess")] =
            QStringLiteral("each process runs 1 to 64 virtual CPU devices, got %1").arg(devicesPerProcess);
    if (processes < 0) {
        out[QStringLiteral("processes")] = QStringLiteral("the number of processes cannot be negative");
    } else if (!out.contains(QStringLiteral("hosts")) && !out.contains(QStringLiteral("hostfile"))) {
        const int total = slotCount();
        if (processCount() < 2)
            out[QStringLiteral("processes")] =
                QStringLiteral("a job needs at least 2 processes (one device each)");
        else if (processes > total && !oversubscribe)
            out[QStringLiteral("processes")] =
                QStringLiteral("%1 processes but %2 slots: add slots or allow oversubscribing").arg(processes).arg(total);
    }
    QString error;
    if (resolvedMpirun(&error).isEmpty()) out[QStringLiteral("mpirun")] = error;
    if (!sharedDir.isEmpty()) {
        const QFileInfo dir(sharedDir);
        if (!dir.isDir()) out[QStringLiteral("sharedDir")] = QStringLiteral("%1 is not a folder").arg(sharedDir);
        else if (!dir.isWritable()) out[QStringLiteral("sharedDir")] = QStringLiteral("%1 cannot be written to").arg(sharedDir);
    } else if (!out.contains(QStringLiteral("hosts")) && !out.contains(QStringLiteral("hostfile")) && !allLocal()) {
        out[QStringLiteral("sharedDir")] =
            QStringLiteral("the other hosts need the experiment file at the same path: give a folder they all see");
    }
    return out;
}

QString ClusterSettings::problemText() const {
    QStringList parts;
    const auto all = problems();
    for (auto it = all.begin(); it != all.end(); ++it) parts << it.key() + QStringLiteral(": ") + it.value();
    return parts.join(QStringLiteral("; "));
}

QString ClusterSettings::processDevices() const {
    QStringList ids;
    for (int d = 0; d < std::max(1, devicesPerProcess); ++d) ids << QStringLiteral("cpu:%1").arg(d);
    return ids.join(QLatin1Char(','));
}

namespace {
// Process `rank`'s devices, each followed by `suffix`.
void addProcessDevices(QStringList& out, int rank, int devices, const QString& suffix) {
    for (int d = 0; d < std::max(1, devices); ++d) out << QStringLiteral("r%1/cpu:%2").arg(rank).arg(d) + suffix;
}
}  // namespace

QStringList ClusterSettings::deviceNames() const {
    QStringList out;
    for (int r = 0; r < processCount(); ++r) addProcessDevices(out, r, devicesPerProcess, {});
    return out;
}

QStringList ClusterSettings::placedDeviceNames() const {
    // mpirun's default mapping: by slot, hosts in order; ranks past the slots (oversubscribed)
    // go round the hosts again, so their host is not told here.
    QStringList out;
    int rank = 0;
    const int n = processCount();
    for (const auto& h : jobHosts())
        for (int k = 0; k < h.slotCount && rank < n; ++k, ++rank)
            addProcessDevices(out, rank, devicesPerProcess, QStringLiteral(" (%1)").arg(h.name));
    for (; rank < n; ++rank) addProcessDevices(out, rank, devicesPerProcess, {});
    return out;
}

QStringList ClusterSettings::mpirunArguments(const QStringList& exported) const {
    QStringList args;
    if (useHostfile) {
        args << QStringLiteral("--hostfile") << hostfile;
    } else {
        QStringList hostArgs;
        for (const auto& h : hosts) hostArgs << QStringLiteral("%1:%2").arg(h.name.trimmed()).arg(h.slotCount);
        args << QStringLiteral("--host") << hostArgs.join(QLatin1Char(','));
    }
    args << QStringLiteral("-np") << QString::number(processCount());
    if (oversubscribe) args << QStringLiteral("--oversubscribe");
    if (geteuid() == 0) args << QStringLiteral("--allow-run-as-root");  // Open MPI refuses root otherwise
    for (const QString& name : exported) args << QStringLiteral("-x") << name;
    return args;
}

QVector<QPair<QString, QString>> localTransportSettings() {
    // Shared memory only, without the single-copy mechanism (CMA) that container seccomp
    // profiles often forbid; waiting ranks yield their core, since they share a few.
    return {{QStringLiteral("OMPI_MCA_btl"), QStringLiteral("self,vader")},
            {QStringLiteral("OMPI_MCA_btl_vader_single_copy_mechanism"), QStringLiteral("none")},
            {QStringLiteral("OMPI_MCA_mpi_yield_when_idle"), QStringLiteral("1")}};
}

}  // namespace paralab::ui
