// The run store (docs/design.md): one SQLite file keeps every run — its experiment, status,
// summary, per-step per-device records and evaluations — so that runs can be compared
// afterwards. WAL mode, so the window reads while a run writes; the schema version is
// PRAGMA user_version and migrations go forward only; a file from a newer ParaLab is refused.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/run/trainer.h"
#include "engine/util/error.h"

struct sqlite3;

namespace paralab::store {

// The schema this build writes.
constexpr int kSchemaVersion = 5;  // 1: runs, records, evaluations; 2: spans; 3: an evaluation's
                                   // loss may be NULL (not finite), the application id is set;
                                   // 4: a run's author; 5: a record's mixture-of-experts routing
// PRAGMA application_id of a ParaLab store ("PLRS"); 0 in stores written before schema 3.
constexpr int32_t kApplicationId = 0x504C5253;

class StoreError : public Error {
public:
    explicit StoreError(const std::string& message, int sqlite_code = 0, bool replaced = false)
        : Error(message), m_code(sqlite_code), m_replaced(replaced) {}
    // SQLite's primary result code of the failure (SQLITE_FULL, SQLITE_BUSY, ...); 0 when the
    // failure is not SQLite's (a missing file, a refused one).
    int code() const { return m_code; }
    bool disk_full() const;
    // The store's file was replaced or deleted under this process (RunStore's commit check).
    bool replaced() const { return m_replaced; }

private:
    int m_code;
    bool m_replaced;
};

// A store opened read-only that is an empty database: a store being created by another opener
// this moment (its schema not written yet), or an empty file. A reader may take it as a store
// with no runs.
class StoreNotCreated : public StoreError {
public:
    using StoreError::StoreError;
};

struct RunRow {
    int64_t run_id = 0;
    std::string name, status, strategy, created_at, finished_at;
    std::vector<std::string> devices;
    nlohmann::json summary;  // the --json summary as far as the run got (null while running)
    nlohmann::json config;   // the experiment it ran
    std::string notes;       // the user's, edited in the window's runs table
    std::string author;      // who ran it (author_name() when it was created); "" before schema 4
};

// The name runs are recorded under: $PARALAB_AUTHOR, else the user's full name from the
// system's user database, else the login name.
std::string author_name();

// A run whose row does not read (a column of the wrong type, `devices` not a list of strings, a
// config nested too deep): left out of list_runs, reported by id.
struct SkippedRun {
    int64_t run_id = 0;
    std::string reason;  // "devices: expected a list of device names, got an object"
};

// The largest text value a store's row may hold when it is read back (a config, a summary, a
// note): an experiment file is at most 16 MiB, a stored config of it about as much.
constexpr int kMaxStoredValueBytes = 32 << 20;

// One point of a run's loss curve: the step over all its devices.
struct LossPoint {
    int64_t step = 0;
    double wall_s = 0;  // when the slowest device ended the step, seconds since training started
    double loss = 0;    // mean over the samples of the devices that computed a loss (NaN: none did,
                        // or the step diverged)
};

// One step's mixture-of-experts routing over every device (StepRecord::moe summed as the
// engine's step does): per layer, in model order.
struct MoEPoint {
    int64_t step = 0;
    std::vector<config::MoERecord> layers;
};

// One device's share of a run, from its recorded steps.
struct DeviceStats {
    std::string device;
    int64_t steps = 0;
    int64_t samples = 0;
    double wall_s = 0;             // the end of its last step
    double samples_per_s = 0;      // samples / wall_s
    int64_t max_memory_bytes = 0;  // the most it held at the end of a step
};

class RunStore {
public:
    enum class Access {
        write,      // creates the store (and its folder) when missing, migrates, marks dead runs
        read_only,  // for listing: never creates, migrates or writes; a read-only file, or a
                    // store on a read-only file system, is read as it is
        untrusted,  // a file from elsewhere (a hand-in) to import: read-only as read_only, and
                    // checked first: SQLite's quick_check, no views, triggers, virtual tables or
                    // generated columns, no value longer than kMaxStoredValueBytes
    };
    // Opens the store. Every connection runs in SQLite's defensive mode with the schema
    // untrusted (no function of the file's own schema runs). A file whose tables runs,
    // records, evaluations or spans are views, virtual tables, have generated columns or
    // triggers is refused before any row is read. Before anything is written, a file that is not a ParaLab store (another
    // application's database, a newer schema) is refused and left as it was. With write access
    // a missing store is created and an older one migrated, and runs left `running` by a process
    // that no longer exists are marked `interrupted` (their rows stay). Throws StoreError naming
    // the file and the cause (missing, unwritable, not a database, not ParaLab's, newer schema).
    // Several processes and connections may write one store at once: a writer that finds the
    // store busy waits for it (up to kBusyTimeoutMs per statement) instead of failing.
    explicit RunStore(const std::string& path, Access access = Access::write);
    ~RunStore();
    RunStore(const RunStore&) = delete;
    RunStore& operator=(const RunStore&) = delete;

    const std::string& path() const { return m_path; }
    // The platform's app-data location: $XDG_DATA_HOME/ParaLab/runs.db, else
    // ~/.local/share/ParaLab/runs.db.
    static std::string default_path();

    static constexpr int kBusyTimeoutMs = 30000;
    // How long a statement waits for a busy store from now on (a window, which must tell its user
    // soon, waits less than a run, which must not lose its rows).
    void set_busy_timeout(int ms);

    // Every commit first checks that the file at path() is still the one this object opened
    // (its device and inode): a store replaced (restored from a backup, another file moved
    // over it) or deleted under a running process fails the write with a StoreError saying so
    // (replaced() true), and nothing is written into a file no one will read.

    int64_t create_run(const config::Experiment& e, const nlohmann::json& config);
    void finish_run(int64_t run_id, const std::string& status, const nlohmann::json& summary);
    // Takes run `run_id` for `paralab run --resume`: its status goes from stopped, interrupted
    // or failed to running, in this process, by one conditional update, so that of two resumes
    // started together only one gets it. Returns the status it had. Throws StoreError "run N is
    // running" (another process resumes or runs it), "run N is not in the store", "run N already
    // finished; nothing to resume" or "run N is STATUS; only a stopped, interrupted or failed run
    // resumes".
    std::string claim_for_resume(int64_t run_id);
    // Gives back a run taken by claim_for_resume that did not start (its experiment or data did
    // not read): its status is `previous` again, if this process still holds it.
    void release_claim(int64_t run_id, const std::string& previous);
    // A run taken by claim_for_resume, resumed after step `after_step`: without a summary; its
    // records, spans and evaluations of later steps (written before it was killed) go, so that
    // its curve holds each step once. One transaction; false when this process does not hold
    // the run (unknown, or no longer running here).
    bool reopen_run(int64_t run_id, int64_t after_step);
    void add_records(int64_t run_id, const std::vector<config::StepRecord>& records);
    void add_eval(int64_t run_id, const config::EvalResult& eval);  // a loss not finite: NULL
    void add_spans(int64_t run_id, const std::vector<config::Span>& spans);
    // The timeline of steps [first_step, last_step], ordered by device and time.
    std::vector<config::Span> spans(int64_t run_id, int64_t first_step, int64_t last_step);

    // Oldest first. Every row is read by value and checked; a row that does not read is left
    // out and, when `skipped` is given, reported there by id and cause.
    std::vector<RunRow> list_runs(std::vector<SkippedRun>* skipped = nullptr);

    // Hand-in: runs `ids` of this store, whole (their records, evaluations, spans, notes and
    // author), into a new store at `dest`, which must not exist yet. Checkpoints stay behind.
    // Returns the new store's run ids, in the order of `ids`. Throws StoreError naming the
    // file and the cause (an unknown run, a file already there); nothing is left at `dest` then.
    std::vector<int64_t> export_runs(const std::vector<int64_t>& ids, const std::string& dest);
    // Every run of the ParaLab store at `source` (any schema this build reads, opened as
    // Access::untrusted) copied into this store under new ids, in their order there; a run still
    // `running` there arrives `interrupted`. Each value is read from the source, checked as
    // list_runs checks a row (and each record's, evaluation's and span's columns by type), and
    // written anew: a row that does not read refuses the import, naming the run. One
    // transaction: all or none; this store is unchanged on any failure. Returns the new ids.
    std::vector<int64_t> import_runs(const std::string& source);
    // The run, or nullopt when it is unknown. Throws StoreError naming the run and the cause
    // when its row does not read (see list_runs).
    std::optional<RunRow> get_run(int64_t run_id);
    // One CSV row per step per device (docs/experiment-format.md's columns); false when the run is unknown.
    bool export_csv(int64_t run_id, std::ostream& out);

    // Queries for the window's runs view.
    // The run's training loss per step, ordered by step (empty when the run is unknown).
    std::vector<LossPoint> loss_curve(int64_t run_id);
    // The steps' mixture-of-experts routing (empty for a run without one), in step order.
    std::vector<MoEPoint> moe_curve(int64_t run_id);
    // Per device, ordered by device name (empty when the run is unknown or has no steps yet).
    std::vector<DeviceStats> device_stats(int64_t run_id);
    // False when the run is unknown.
    bool set_notes(int64_t run_id, const std::string& notes);
    // The run with its records, evaluations and spans, in one transaction (all or nothing);
    // false when the run is unknown.
    bool delete_run(int64_t run_id);

private:
    void exec(const char* sql);
    // Throws StoreError (replaced()) when the file at m_path is not the one opened.
    void check_same_file();
    // Refuses a file whose store tables are not plain tables of stored columns (views, virtual
    // tables, generated columns, triggers on them); with `untrusted`, any view or trigger at all,
    // and a file that fails SQLite's quick_check.
    void check_schema_objects(bool untrusted);
    // `body` in one write transaction (BEGIN IMMEDIATE: the write lock first, waited for while
    // another connection writes), committed when it returns and rolled back when it throws;
    // returns what `body` returns.
    template <class F>
    auto in_write_transaction(F&& body);
    // Opens m_db (a path, or a URI with SQLITE_OPEN_URI) with the busy timeout set.
    void open_connection(const std::string& name, int flags);
    void harden_connection();
    // Refuses, writing nothing, a database that is not a ParaLab store: tables but no schema
    // version of ours, or a version newer than this build reads. Returns the version (0: empty).
    int64_t check_is_ours();
    void migrate();
    // Runs left `running` by a process of this machine that is gone become `interrupted`: in the
    // store with write access, in what this object reports when read-only.
    void mark_interrupted(bool write);

    std::string m_path;
    sqlite3* m_db = nullptr;
    std::mutex m_mutex;  // one connection, used from the writer thread and the caller
    std::set<int64_t> m_interrupted;  // read-only access: runs reported interrupted
    std::optional<bool> m_has_author;  // runs.author exists (a read-only older store has none)
    bool m_untrusted = false;
    bool m_writable = false;
    uint64_t m_file_device = 0, m_file_inode = 0;  // the file opened, for check_same_file
    uint64_t m_wal_device = 0, m_wal_inode = 0;    // its write-ahead log
    // Copies runs `ids` of the attached database `from` into `to` ("main" or "dest").
    std::vector<int64_t> copy_runs(const std::string& from, const std::string& to, const std::vector<int64_t>& ids);
    bool has_column(const std::string& schema, const std::string& table, const std::string& column);
};

// A RunObserver that records a run into a store from a writer thread of its own: steps are
// queued and written in batched transactions, so training never waits on the disk. A write
// that fails for lack of space (SQLITE_FULL) fails the run: on_disk_full's callback is called
// once (to stop the run), nothing more is written but the run's end, which is recorded as
// `failed` with the error "disk full: ..."; the rows committed before stay. A store file
// replaced or deleted under the run (StoreError::replaced) fails it the same way, with that
// error, and nothing more is written at all.
class RunRecorder : public run::RunObserver {
public:
    RunRecorder(RunStore& store, nlohmann::json config);
    ~RunRecorder() override;  // flushes what is queued

    void on_start(const config::Experiment& e, int64_t total_steps) override;
    void on_span(const config::Span& s) override;
    void on_step(const config::StepRecord& r) override;
    void on_eval(const config::EvalResult& r) override;
    void on_finish(const config::RunSummary& s) override;
    int64_t run_id() const { return m_run_id; }
    // Writes the whole steps queued now, as the writer thread does every 200 ms.
    void flush();
    // Before on_start: record into the existing run `run_id` instead of a new one, taken
    // (RunStore::claim_for_resume, unless the caller has taken it: `claimed`) and reopened
    // (RunStore::reopen_run) after the step `after_step` returns when the run starts. A run
    // another process holds fails on_start with StoreError "run N is running".
    void resume(int64_t run_id, std::function<int64_t()> after_step, bool claimed = false) {
        m_resume_id = run_id;
        m_resume_after = std::move(after_step);
        m_resume_claimed = claimed;
    }
    // The first failure to write ("" when none). Any other failure than a full disk: the run
    // goes on, the caller reports it.
    std::string write_error();
    // Called once, from the thread whose write failed, when the disk is full or the store's file
    // was replaced (set before on_start).
    void on_store_failed(std::function<void()> callback) { m_on_store_failed = std::move(callback); }
    bool disk_full();
    // The disk filled up, or the store's file was replaced or deleted: the run fails.
    bool store_failed();
    // The summary as recorded: a run whose store filled up (or was replaced) is `failed` with
    // that error (a run that failed for another reason keeps its own error).
    config::RunSummary as_recorded(config::RunSummary s);

private:
    void writer_loop();
    // Writes what is queued: only whole steps (every device's record in) unless `all`, so that a
    // process killed between two writes leaves each step whole or absent.
    void flush_queue(std::unique_lock<std::mutex>& lock, bool all = false);
    // Runs one write of the store; false (and the failure noted) when it threw StoreError.
    // Nothing is written once the disk was found full, but the run's end.
    template <class F>
    bool write(F&& f, bool after_full = false);

    RunStore& m_store;
    nlohmann::json m_config;
    int64_t m_run_id = 0;
    size_t m_device_count = 0;                   // from on_start
    std::map<std::string, int64_t> m_latest;     // per device: the newest step queued
    int64_t m_resume_id = 0;
    std::function<int64_t()> m_resume_after;
    bool m_resume_claimed = false;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::vector<config::StepRecord> m_queue;  // guarded by m_mutex
    std::vector<config::Span> m_span_queue;   // guarded by m_mutex
    bool m_stop = false;                   // guarded by m_mutex
    std::string m_error;                   // guarded by m_mutex: the first write failure, or the disk-full one
    bool m_disk_full = false;              // guarded by m_mutex
    bool m_replaced = false;               // guarded by m_mutex: the store's file was replaced
    std::function<void()> m_on_store_failed;
    std::thread m_writer;
};

// The --json summary object of docs/experiment-format.md.
nlohmann::json summary_json(const config::RunSummary& s, int64_t run_id);

}  // namespace paralab::store
