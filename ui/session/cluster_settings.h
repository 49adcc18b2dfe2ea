// The window's cluster device source: where a job's processes run (a host list with
// slots, or an Open MPI hostfile), how many there are, and which mpirun starts them. Kept in
// QSettings under "cluster/"; checked field by field so that the Devices panel can say what is
// wrong beside the field, and turned into mpirun's arguments for ClusterRunController.
//
// Each process runs `devicesPerProcess` virtual CPU devices (cpu:0 .. cpu:D-1), so a job of N
// processes has the devices r0/cpu:0 .. rN-1/cpu:D-1; mpirun places ranks by slot: the first
// host's slots first, in the list's order.
#pragma once

#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>

class QSettings;

namespace paralab::ui {

struct ClusterHost {
    QString name;
    int slotCount = 1;
    bool operator==(const ClusterHost&) const = default;
};

struct ClusterSettings {
    bool enabled = false;      // the window's device source: false = this machine's rank threads
    bool useHostfile = false;  // the hostfile instead of the host list
    QVector<ClusterHost> hosts{{QStringLiteral("localhost"), 2}};
    QString hostfile;
    int processes = 0;          // 0: one per slot
    int devicesPerProcess = 1;  // virtual CPU devices each process runs
    bool oversubscribe = false; // more processes than slots (mpirun --oversubscribe)
    QString mpirun;             // empty: mpirun on PATH
    // Where the job's experiment file is written: a folder every host sees at the same path
    // (a shared file system). Empty: this machine's temporary folder, enough when every host
    // is this machine.
    QString sharedDir;

    bool operator==(const ClusterSettings&) const = default;

    void save(QSettings& settings) const;
    static ClusterSettings load(QSettings& settings);

    // The hosts the job runs on: the list, or the hostfile's lines ("host slots=N", '#'
    // comments; a host without slots= has one). A hostfile that cannot be read or parsed gives
    // no hosts and `error` says why.
    QVector<ClusterHost> jobHosts(QString* error = nullptr) const;
    int slotCount() const;     // over jobHosts()
    int processCount() const;  // `processes`, or slotCount() when 0
    // True when every host is this machine (localhost, 127.x, or its host name): the job then
    // gets the shared-memory transport settings (OMPI_MCA_btl=self,vader ...).
    bool allLocal() const;

    // The mpirun to start: `mpirun` when it is an executable file, else mpirun on PATH. Empty,
    // with `error` saying why, when there is none.
    QString resolvedMpirun(QString* error = nullptr) const;

    // What is wrong, by field: "hosts", "hostfile", "processes", "devicesPerProcess", "mpirun",
    // "sharedDir". Empty when a job
    // can be started.
    QMap<QString, QString> problems() const;
    // The problems as one message ("hosts: ...; mpirun: ..."), for a start that is refused.
    QString problemText() const;

    // What each process passes to `paralab run --devices`: "cpu:0,cpu:1,...".
    QString processDevices() const;
    // The job's devices in rank order (r0/cpu:0, r0/cpu:1, r1/cpu:0, ...), and the same with the
    // host each process lands on ("r0/cpu:0 (localhost)").
    QStringList deviceNames() const;
    QStringList placedDeviceNames() const;

    // mpirun's arguments before the program: --host h1:s1,h2:s2 or --hostfile F, -np N,
    // --oversubscribe, --allow-run-as-root when running as root, and -x for each variable of
    // `exported` (the local transport settings).
    QStringList mpirunArguments(const QStringList& exported = {}) const;
};

// The shared-memory settings a job on this machine needs (tests/mpi/run_mpi_test.sh): names
// and values, each used only where the caller's environment does not set it already.
QVector<QPair<QString, QString>> localTransportSettings();

}  // namespace paralab::ui
