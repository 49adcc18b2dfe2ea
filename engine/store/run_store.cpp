#include "engine/store/run_store.h"

#include <sqlite3.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <ostream>
#include <thread>
#include <type_traits>
#include <pwd.h>
#include <unistd.h>

namespace paralab::store {

using nlohmann::json;

bool StoreError::disk_full() const { return m_code == SQLITE_FULL; }

namespace {

std::string now_iso8601() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// A prepared statement that finalizes itself; every status is checked.
class Statement {
public:
    Statement(sqlite3* db, const char* sql, const std::string& path) : m_db(db), m_path(path) {
        if (sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr) != SQLITE_OK) fail("prepare");
    }
    ~Statement() { sqlite3_finalize(m_stmt); }
    Statement& bind(int i, int64_t v) { return check(sqlite3_bind_int64(m_stmt, i, v)); }
    Statement& bind(int i, double v) { return check(sqlite3_bind_double(m_stmt, i, v)); }
    Statement& bind(int i, const std::string& v) {
        return check(sqlite3_bind_text(m_stmt, i, v.c_str(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
    Statement& bind_null(int i) { return check(sqlite3_bind_null(m_stmt, i)); }
    bool step() {
        const int rc = sqlite3_step(m_stmt);
        if (rc == SQLITE_ROW) return true;
        if (rc != SQLITE_DONE) fail("step");
        return false;
    }
    void reset() {
        sqlite3_reset(m_stmt);
        sqlite3_clear_bindings(m_stmt);
    }
    int64_t integer(int c) const { return sqlite3_column_int64(m_stmt, c); }
    double real(int c) const { return sqlite3_column_double(m_stmt, c); }
    bool is_null(int c) const { return sqlite3_column_type(m_stmt, c) == SQLITE_NULL; }
    std::string text(int c) const {
        const auto* p = sqlite3_column_text(m_stmt, c);
        return p ? reinterpret_cast<const char*>(p) : "";
    }

private:
    Statement& check(int rc) {
        if (rc != SQLITE_OK) fail("bind");
        return *this;
    }
    [[noreturn]] void fail(const char* what) {
        throw StoreError(m_path + ": " + what + " failed: " + sqlite3_errmsg(m_db), sqlite3_errcode(m_db) & 0xff);
    }
    sqlite3* m_db;
    sqlite3_stmt* m_stmt = nullptr;
    const std::string& m_path;
};

// A URI that opens `path` read-only as a file nothing changes (no locks, no shared memory).
std::string uri_immutable(const std::string& path) {
    std::string uri = "file:";
    for (unsigned char c : std::filesystem::absolute(path).string()) {
        if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') {
            uri += static_cast<char>(c);
        } else {
            char hex[4];
            std::snprintf(hex, sizeof hex, "%%%02X", c);
            uri += hex;
        }
    }
    return uri + "?immutable=1";
}

json parse_or_null(const std::string& text) {
    if (text.empty()) return nullptr;
    return json::parse(text, nullptr, false);
}

}  // namespace

std::string author_name() {
    if (const char* a = std::getenv("PARALAB_AUTHOR"); a && *a) return a;
    // getpwuid_r, not getpwuid: create_run may be called from several threads at once, and
    // getpwuid fills one static record that a concurrent call overwrites.
    long size = sysconf(_SC_GETPW_R_SIZE_MAX);
    std::vector<char> buffer(size > 0 ? static_cast<size_t>(size) : 16384);
    passwd record{};
    passwd* pw = nullptr;
    while (getpwuid_r(getuid(), &record, buffer.data(), buffer.size(), &pw) == ERANGE &&
           buffer.size() < (size_t{1} << 20))
        buffer.resize(buffer.size() * 2);
    if (pw) {
        std::string full = pw->pw_gecos ? pw->pw_gecos : "";
        full = full.substr(0, full.find(','));  // "Ada Lovelace,room,phone,..."
        if (!full.empty()) return full;
        if (pw->pw_name) return pw->pw_name;
    }
    return {};
}

bool RunStore::has_column(const std::string& schema, const std::string& table, const std::string& column) {
    const std::string sql = "PRAGMA " + schema + ".table_info(" + table + ")";
    Statement q(m_db, sql.c_str(), m_path);
    while (q.step())
        if (q.text(1) == column) return true;
    return false;
}

std::vector<int64_t> RunStore::copy_runs(const std::string& from, const std::string& to,
                                         const std::vector<int64_t>& ids, bool has_author, bool has_spans) {
    std::vector<int64_t> copied;
    for (const int64_t id : ids) {
        std::string sql = "INSERT INTO " + to +
                          ".runs (name, status, strategy, devices, config, created_at, finished_at, summary, "
                          "notes, pid, host, author) SELECT name, CASE status WHEN 'running' THEN 'interrupted' "
                          "ELSE status END, strategy, devices, config, created_at, finished_at, summary, notes, "
                          "NULL, host, ";
        sql += has_author ? "author" : "''";
        sql += " FROM " + from + ".runs WHERE run_id = ?";
        Statement(m_db, sql.c_str(), m_path).bind(1, id).step();
        if (sqlite3_changes(m_db) == 0) throw StoreError(m_path + ": run " + std::to_string(id) + " is not in the store");
        const int64_t copy = sqlite3_last_insert_rowid(m_db);
        std::vector<std::string> rows = {
            "INSERT INTO " + to + ".records (run_id, step, device, epoch, wall_s, loss, samples, compute_ms, "
                "comm_ms, idle_ms, data_wait_ms, memory_bytes, lr) SELECT ?, step, device, epoch, wall_s, loss, "
                "samples, compute_ms, comm_ms, idle_ms, data_wait_ms, memory_bytes, lr FROM " + from +
                ".records WHERE run_id = ?",
            "INSERT INTO " + to + ".evaluations (run_id, step, loss, accuracy, samples) SELECT ?, step, loss, "
                "accuracy, samples FROM " + from + ".evaluations WHERE run_id = ?"};
        if (has_spans)
            rows.push_back("INSERT INTO " + to + ".spans (run_id, device, step, phase, t_begin, t_end, bytes) "
                           "SELECT ?, device, step, phase, t_begin, t_end, bytes FROM " + from +
                           ".spans WHERE run_id = ?");
        for (const std::string& q : rows) Statement(m_db, q.c_str(), m_path).bind(1, copy).bind(2, id).step();
        copied.push_back(copy);
    }
    return copied;
}

template <class F>
auto RunStore::in_write_transaction(F&& body) {
    exec("BEGIN IMMEDIATE");
    try {
        if constexpr (std::is_void_v<decltype(body())>) {
            body();
            exec("COMMIT");
        } else {
            auto result = body();
            exec("COMMIT");
            return result;
        }
    } catch (...) {
        sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

std::vector<int64_t> RunStore::export_runs(const std::vector<int64_t>& ids, const std::string& dest) {
    std::error_code ec;
    if (std::filesystem::exists(dest, ec))
        throw StoreError(dest + ": already exists; runs are handed in to a new file");
    { RunStore created(dest); }  // an empty store of this schema
    auto remove_dest = [&] {
        for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(dest + suffix, ec);
    };
    std::lock_guard lock(m_mutex);
    try {
        Statement(m_db, "ATTACH DATABASE ? AS dest", m_path).bind(1, dest).step();
    } catch (...) {
        remove_dest();
        throw;
    }
    std::vector<int64_t> copied;
    try {
        in_write_transaction([&] {
            copied = copy_runs("main", "dest", ids, true, true);
        });
    } catch (...) {
        sqlite3_exec(m_db, "DETACH DATABASE dest", nullptr, nullptr, nullptr);
        remove_dest();
        throw;
    }
    exec("DETACH DATABASE dest");
    return copied;
}

std::vector<int64_t> RunStore::import_runs(const std::string& source) {
    std::error_code ec;
    if (std::filesystem::equivalent(source, m_path, ec))
        throw StoreError(source + ": that is this run store itself");
    { RunStore check(source, Access::read_only); }  // refuses what is not a ParaLab store
    std::lock_guard lock(m_mutex);
    Statement(m_db, "ATTACH DATABASE ? AS src", m_path).bind(1, source).step();
    std::vector<int64_t> copied;
    try {
        std::vector<int64_t> ids;
        Statement q(m_db, "SELECT run_id FROM src.runs ORDER BY run_id", m_path);
        while (q.step()) ids.push_back(q.integer(0));
        const bool author = has_column("src", "runs", "author"), spans = has_column("src", "spans", "run_id");
        in_write_transaction([&] {
            copied = copy_runs("src", "main", ids, author, spans);
        });
    } catch (...) {
        sqlite3_exec(m_db, "DETACH DATABASE src", nullptr, nullptr, nullptr);
        throw;
    }
    exec("DETACH DATABASE src");
    return copied;
}

std::string RunStore::default_path() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
        return std::string(xdg) + "/ParaLab/runs.db";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.local/share/ParaLab/runs.db";
}

RunStore::RunStore(const std::string& path, Access access) : m_path(path) {
    const bool write = access == Access::write;
    std::error_code ec;
    if (!write) {
        // Listing never creates a store (nor its folder) where there is none.
        if (!std::filesystem::is_regular_file(path, ec))
            throw StoreError(path + ": no run store here (" +
                             (std::filesystem::exists(path, ec) ? "not a regular file" : "no such file") + ")");
    } else {
        const auto parent = std::filesystem::path(path).parent_path();
        if (!parent.empty()) std::filesystem::create_directories(parent, ec);
        if (ec) throw StoreError(path + ": cannot create the folder " + parent.string() + ": " + ec.message());
    }
    if (write) {  // the store keeps its write-ahead log beside it: its folder must be writable too
        const auto folder = std::filesystem::absolute(path, ec).parent_path();
        if (!ec && ::access(folder.c_str(), W_OK | X_OK) != 0)
            throw StoreError(path + ": cannot record a run here: the folder " + folder.string() +
                                 " is not writable (" + std::strerror(errno) + "); choose another file with --db",
                             SQLITE_READONLY);
    }
    const int flags = (write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY) | SQLITE_OPEN_FULLMUTEX;
    open_connection(path, flags);
    if (write && sqlite3_db_readonly(m_db, "main") == 1) {  // SQLite fell back to reading it
        sqlite3_close(m_db);
        m_db = nullptr;
        throw StoreError(path + ": cannot record a run here: the run store is read-only (its permissions "
                                "or a read-only file system); choose another file with --db",
                         SQLITE_READONLY);
    }
    try {
        int64_t version = 0;
        try {
            version = check_is_ours();
        } catch (const StoreError& e) {
            // A WAL store on a read-only file system (or in a folder this user cannot write):
            // SQLite cannot create the shared-memory file beside it. With no write-ahead log
            // there, no writer can have the store open, and the file alone is the whole store.
            if (write || e.code() != SQLITE_CANTOPEN) throw;
            if (std::filesystem::exists(path + "-wal", ec))
                throw StoreError(path + ": cannot read the run store: its write-ahead log " + path +
                                     "-wal needs a shared-memory file beside it, which cannot be created "
                                     "here (a read-only folder or file system)",
                                 SQLITE_CANTOPEN);
            sqlite3_close(m_db);
            m_db = nullptr;
            open_connection(uri_immutable(path), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX);
            version = check_is_ours();
        }
        if (!write) {
            if (version == 0) throw StoreNotCreated(path + ": an empty database, not a ParaLab run store yet");
            mark_interrupted(false);  // read as it is: no journal switch, no migration, no writes
            return;
        }
        // Switching a new file to WAL takes a lock that the busy timeout does not wait for: two
        // openers of a store that does not exist yet (the window's runs view and a run) could
        // fail here at once. Retry for as long as the busy timeout would have waited.
        for (int attempt = 0;; ++attempt) {
            const int rc = sqlite3_exec(m_db, "PRAGMA journal_mode=WAL", nullptr, nullptr, nullptr);
            if (rc == SQLITE_OK) break;
            if ((rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || attempt >= kBusyTimeoutMs / 10)
                exec("PRAGMA journal_mode=WAL");
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        exec("PRAGMA synchronous=NORMAL");
        exec("PRAGMA foreign_keys=ON");
        migrate();
        mark_interrupted(true);
    } catch (const StoreError& e) {
        sqlite3_close(m_db);
        m_db = nullptr;
        const std::string what = e.what();
        if (e.code() == SQLITE_NOTADB || what.find("not a database") != std::string::npos)
            throw StoreError(path + ": not a ParaLab run store (the file is not an SQLite "
                                    "database, or it is damaged); choose another file with --db",
                             SQLITE_NOTADB);
        if (e.disk_full())
            throw StoreError(path + ": disk full: the run store cannot be initialised (" + what +
                                 "); free some space or choose another file with --db",
                             SQLITE_FULL);
        throw;
    }
}

void RunStore::open_connection(const std::string& name, int flags) {
    if (sqlite3_open_v2(name.c_str(), &m_db, flags, nullptr) != SQLITE_OK) {
        const std::string why = m_db ? sqlite3_errmsg(m_db) : "out of memory";
        const int code = m_db ? sqlite3_errcode(m_db) & 0xff : SQLITE_NOMEM;
        sqlite3_close(m_db);
        m_db = nullptr;
        throw StoreError(m_path + ": cannot open the run store: " + why, code);
    }
    sqlite3_extended_result_codes(m_db, 0);
    sqlite3_busy_timeout(m_db, kBusyTimeoutMs);
}

RunStore::~RunStore() { sqlite3_close(m_db); }

void RunStore::set_busy_timeout(int ms) { sqlite3_busy_timeout(m_db, ms); }

void RunStore::exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(m_db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string why = err ? err : sqlite3_errmsg(m_db);
        sqlite3_free(err);
        throw StoreError(m_path + ": " + why, sqlite3_errcode(m_db) & 0xff);
    }
}

int64_t RunStore::check_is_ours() {
    std::lock_guard lock(m_mutex);
    // One statement, one snapshot: another opener may be creating the schema meanwhile.
    Statement q(m_db,
                "SELECT (SELECT user_version FROM pragma_user_version), "
                "(SELECT count(*) FROM sqlite_master WHERE type = 'table'), "
                "(SELECT application_id FROM pragma_application_id)",
                m_path);
    q.step();
    const int64_t version = q.integer(0), tables = q.integer(1), application = q.integer(2);
    if (application != 0 && application != kApplicationId) {
        char id[16];
        std::snprintf(id, sizeof id, "0x%08llX", static_cast<unsigned long long>(application & 0xffffffff));
        throw StoreError(m_path + ": not a ParaLab run store (its application id " + id +
                         " is another application's); it was left as it was: choose another file with --db");
    }
    if (version > kSchemaVersion)
        throw StoreError(m_path + ": this run store has schema version " + std::to_string(version) +
                         ", written by a newer ParaLab (this one reads up to " +
                         std::to_string(kSchemaVersion) + "); update ParaLab or choose another file");
    if (version > 0) {
        // Ours has a runs table with these columns; another application may use user_version too.
        Statement c(m_db, "SELECT count(*) FROM pragma_table_info('runs') WHERE name IN ('run_id', 'strategy', 'config', 'status')",
                    m_path);
        c.step();
        if (c.integer(0) != 4)
            throw StoreError(m_path + ": not a ParaLab run store (schema version " + std::to_string(version) +
                             " but no ParaLab runs table); it was left as it was: choose another file with --db");
    }
    if (version == 0 && tables > 0)
        throw StoreError(m_path + ": not a ParaLab run store (the database holds " + std::to_string(tables) +
                         " table" + (tables == 1 ? "" : "s") + " of another application); it was left "
                         "as it was: choose another file with --db");
    return version;
}

void RunStore::migrate() {
    std::lock_guard lock(m_mutex);
    // Read in a statement of its own that is done before any write transaction begins: an open
    // read would make BEGIN IMMEDIATE fail at once (not wait) when another opener writes first.
    auto read_version = [this] {
        Statement v(m_db, "PRAGMA user_version", m_path);
        v.step();
        return v.integer(0);
    };
    int64_t version = read_version();
    if (version > kSchemaVersion)
        throw StoreError(m_path + ": this run store has schema version " + std::to_string(version) +
                         ", written by a newer ParaLab (this one reads up to " +
                         std::to_string(kSchemaVersion) + "); update ParaLab or choose another file");
    if (version >= kSchemaVersion) return;
    // One write transaction: the version read again under the write lock (another opener may
    // have migrated meanwhile, even to the newest schema), the steps still missing, the commit.
    // Every path ends the transaction: one left open would hold this connection's later writes
    // (a run's rows) and roll them back when the store closes.
    in_write_transaction([&] {
        version = read_version();
        if (version < 1) exec(R"(
CREATE TABLE IF NOT EXISTS runs (
  run_id      INTEGER PRIMARY KEY AUTOINCREMENT,
  name        TEXT NOT NULL,
  status      TEXT NOT NULL,
  strategy    TEXT NOT NULL,
  devices     TEXT NOT NULL,
  config      TEXT NOT NULL,
  created_at  TEXT NOT NULL,
  finished_at TEXT,
  summary     TEXT,
  notes       TEXT NOT NULL DEFAULT '',
  pid         INTEGER,
  host        TEXT
);
CREATE TABLE IF NOT EXISTS records (
  run_id       INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  step         INTEGER NOT NULL,
  device       TEXT NOT NULL,
  epoch        INTEGER NOT NULL,
  wall_s       REAL NOT NULL,
  loss         REAL,
  samples      INTEGER NOT NULL,
  compute_ms   REAL NOT NULL,
  comm_ms      REAL NOT NULL,
  idle_ms      REAL NOT NULL,
  data_wait_ms REAL NOT NULL,
  memory_bytes INTEGER NOT NULL,
  lr           REAL,
  PRIMARY KEY (run_id, step, device)
);
CREATE TABLE IF NOT EXISTS evaluations (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  step     INTEGER NOT NULL,
  loss     REAL NOT NULL,
  accuracy REAL,
  samples  INTEGER NOT NULL
);
PRAGMA user_version = 1;
)");
        if (version < 2) exec(R"(
CREATE TABLE IF NOT EXISTS spans (
  run_id  INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  device  TEXT NOT NULL,
  step    INTEGER NOT NULL,
  phase   TEXT NOT NULL,
  t_begin REAL NOT NULL,
  t_end   REAL NOT NULL,
  bytes   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS spans_by_step ON spans (run_id, step);
PRAGMA user_version = 2;
)");
        // SQLite stores a NaN as NULL: an evaluation whose loss is not finite is kept, loss NULL.
        if (version < 3) {
            exec(R"(
CREATE TABLE evaluations_v3 (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  step     INTEGER NOT NULL,
  loss     REAL,
  accuracy REAL,
  samples  INTEGER NOT NULL
);
INSERT INTO evaluations_v3 (run_id, step, loss, accuracy, samples)
  SELECT run_id, step, loss, accuracy, samples FROM evaluations;
DROP TABLE evaluations;
ALTER TABLE evaluations_v3 RENAME TO evaluations;
)");
            exec(("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str());
            exec("PRAGMA user_version = 3");
        }
        if (version < 4) {
            exec("ALTER TABLE runs ADD COLUMN author TEXT NOT NULL DEFAULT ''");
            exec("PRAGMA user_version = 4");
        }
    });
}

void RunStore::mark_interrupted(bool write) {
    std::lock_guard lock(m_mutex);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    Statement q(m_db, "SELECT run_id, pid, host FROM runs WHERE status = 'running'", m_path);
    std::vector<int64_t> dead;
    while (q.step()) {
        const auto pid = static_cast<pid_t>(q.integer(1));
        // Only a process on this machine can be checked; kill(pid, 0) fails with ESRCH when it is gone.
        if (q.text(2) == host && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) dead.push_back(q.integer(0));
    }
    if (!write) {  // read-only: reported so, not written
        m_interrupted.insert(dead.begin(), dead.end());
        return;
    }
    Statement u(m_db, "UPDATE runs SET status = 'interrupted' WHERE run_id = ?", m_path);
    for (int64_t id : dead) {
        u.bind(1, id).step();
        u.reset();
    }
}

int64_t RunStore::create_run(const config::Experiment& e, const json& config) {
    std::lock_guard lock(m_mutex);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    Statement s(m_db,
                "INSERT INTO runs (name, status, strategy, devices, config, created_at, pid, host, author) "
                "VALUES (?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                m_path);
    s.bind(1, e.name).bind(2, e.strategy.type).bind(3, json(e.devices).dump()).bind(4, config.dump());
    s.bind(5, now_iso8601()).bind(6, static_cast<int64_t>(getpid())).bind(7, std::string(host));
    s.bind(8, author_name());
    s.step();
    return sqlite3_last_insert_rowid(m_db);
}

void RunStore::finish_run(int64_t run_id, const std::string& status, const json& summary) {
    std::lock_guard lock(m_mutex);
    Statement s(m_db, "UPDATE runs SET status = ?, summary = ?, finished_at = ? WHERE run_id = ?", m_path);
    s.bind(1, status).bind(2, summary.dump()).bind(3, now_iso8601()).bind(4, run_id);
    s.step();
}

bool RunStore::reopen_run(int64_t run_id, int64_t after_step) {
    std::lock_guard lock(m_mutex);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return in_write_transaction([&] {
        for (const char* sql : {"DELETE FROM spans WHERE run_id = ? AND step > ?",
                                "DELETE FROM evaluations WHERE run_id = ? AND step > ?",
                                "DELETE FROM records WHERE run_id = ? AND step > ?"}) {
            Statement s(m_db, sql, m_path);
            s.bind(1, run_id).bind(2, after_step).step();
        }
        Statement s(m_db,
                    "UPDATE runs SET status = 'running', summary = NULL, finished_at = NULL, pid = ?, host = ? "
                    "WHERE run_id = ?",
                    m_path);
        s.bind(1, static_cast<int64_t>(getpid())).bind(2, std::string(host)).bind(3, run_id).step();
        const bool found = sqlite3_changes(m_db) > 0;
        return found;
    });
}

void RunStore::add_records(int64_t run_id, const std::vector<config::StepRecord>& records) {
    if (records.empty()) return;
    std::lock_guard lock(m_mutex);
    in_write_transaction([&] {
        Statement s(m_db,
                    "INSERT OR REPLACE INTO records (run_id, step, device, epoch, wall_s, loss, samples, "
                    "compute_ms, comm_ms, idle_ms, data_wait_ms, memory_bytes, lr) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    m_path);
        for (const auto& r : records) {
            s.bind(1, run_id).bind(2, r.step).bind(3, r.device).bind(4, r.epoch).bind(5, r.wall_s);
            if (std::isfinite(r.loss)) s.bind(6, r.loss);
            else s.bind_null(6);
            s.bind(7, r.samples).bind(8, r.compute_ms).bind(9, r.comm_ms).bind(10, r.idle_ms);
            // The step's peak (activations included); a record without one, what was live at its end.
            const int64_t memory = r.memory.step_peak_total > 0 ? r.memory.step_peak_total : r.memory.current_total;
            s.bind(11, r.data_wait_ms).bind(12, memory).bind(13, r.lr);
            s.step();
            s.reset();
        }
    });
}

void RunStore::add_eval(int64_t run_id, const config::EvalResult& ev) {
    std::lock_guard lock(m_mutex);
    Statement s(m_db, "INSERT INTO evaluations (run_id, step, loss, accuracy, samples) VALUES (?, ?, ?, ?, ?)",
                m_path);
    s.bind(1, run_id).bind(2, ev.step);
    if (std::isfinite(ev.loss)) s.bind(3, ev.loss);
    else s.bind_null(3);
    if (ev.accuracy && std::isfinite(*ev.accuracy)) s.bind(4, *ev.accuracy);
    else s.bind_null(4);
    s.bind(5, ev.samples).step();
}

void RunStore::add_spans(int64_t run_id, const std::vector<config::Span>& spans) {
    if (spans.empty()) return;
    std::lock_guard lock(m_mutex);
    in_write_transaction([&] {
        Statement s(m_db,
                    "INSERT INTO spans (run_id, device, step, phase, t_begin, t_end, bytes) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    m_path);
        for (const auto& sp : spans) {
            s.bind(1, run_id).bind(2, sp.device).bind(3, sp.step).bind(4, sp.phase);
            s.bind(5, sp.t_begin).bind(6, sp.t_end).bind(7, sp.bytes).step();
            s.reset();
        }
    });
}

std::vector<config::Span> RunStore::spans(int64_t run_id, int64_t first_step, int64_t last_step) {
    std::lock_guard lock(m_mutex);
    Statement q(m_db,
                "SELECT step, device, phase, t_begin, t_end, bytes FROM spans "
                "WHERE run_id = ? AND step BETWEEN ? AND ? ORDER BY device, t_begin",
                m_path);
    q.bind(1, run_id).bind(2, first_step).bind(3, last_step);
    std::vector<config::Span> out;
    while (q.step()) {
        config::Span sp;
        sp.step = q.integer(0);
        sp.device = q.text(1);
        sp.phase = q.text(2);
        sp.t_begin = q.real(3);
        sp.t_end = q.real(4);
        sp.bytes = q.integer(5);
        out.push_back(std::move(sp));
    }
    return out;
}

std::vector<RunRow> RunStore::list_runs() {
    std::lock_guard lock(m_mutex);
    // A read-only store of an older schema has no author column.
    std::string sql =
        "SELECT run_id, name, status, strategy, devices, created_at, finished_at, summary, config, notes, ";
    if (!m_has_author) m_has_author = has_column("main", "runs", "author");
    sql += *m_has_author ? "author" : "''";
    sql += " FROM runs ORDER BY run_id";
    Statement q(m_db, sql.c_str(), m_path);
    std::vector<RunRow> rows;
    while (q.step()) {
        RunRow r;
        r.run_id = q.integer(0);
        r.name = q.text(1);
        r.status = q.text(2);
        if (r.status == "running" && m_interrupted.count(r.run_id)) r.status = "interrupted";
        r.strategy = q.text(3);
        const json devices = parse_or_null(q.text(4));
        if (devices.is_array())
            for (const auto& d : devices) r.devices.push_back(d.get<std::string>());
        r.created_at = q.text(5);
        r.finished_at = q.text(6);
        r.summary = parse_or_null(q.text(7));
        r.config = parse_or_null(q.text(8));
        r.notes = q.text(9);
        r.author = q.text(10);
        rows.push_back(std::move(r));
    }
    return rows;
}

std::optional<RunRow> RunStore::get_run(int64_t run_id) {
    std::optional<RunRow> row;
    for (auto& r : list_runs())
        if (r.run_id == run_id) row = std::move(r);
    if (!row || !row->summary.is_null()) return row;
    // Running or interrupted: the summary as far as the committed rows go.
    std::lock_guard lock(m_mutex);
    Statement q(m_db,
                "SELECT step, epoch, wall_s, loss FROM records WHERE run_id = ? "
                "ORDER BY step DESC LIMIT 1",
                m_path);
    q.bind(1, run_id);
    json s{{"run_id", run_id}, {"status", row->status}, {"name", row->name},
           {"strategy", row->strategy}, {"devices", row->devices}, {"steps", 0}};
    if (q.step()) {
        s["steps"] = q.integer(0);
        s["epochs"] = q.integer(1) + 1;
        s["wall_s"] = q.real(2);
        s["final_loss"] = q.is_null(3) ? json(nullptr) : json(q.real(3));
    }
    row->summary = s;
    return row;
}

bool RunStore::export_csv(int64_t run_id, std::ostream& out) {
    if (!get_run(run_id)) return false;
    std::lock_guard lock(m_mutex);
    Statement q(m_db,
                "SELECT step, device, epoch, wall_s, loss, samples, compute_ms, comm_ms, idle_ms, "
                "data_wait_ms, memory_bytes, lr FROM records WHERE run_id = ? ORDER BY step, device",
                m_path);
    q.bind(1, run_id);
    out << "step,device,epoch,wall_s,loss,samples,samples_per_s,compute_ms,comm_ms,idle_ms,"
           "data_wait_ms,memory_bytes,lr\n";
    out.precision(9);
    while (q.step()) {
        const double step_s = (q.real(6) + q.real(7) + q.real(8) + q.real(9)) / 1000.0;
        out << q.integer(0) << ',' << q.text(1) << ',' << q.integer(2) << ',' << q.real(3) << ',';
        if (!q.is_null(4)) out << q.real(4);
        out << ',' << q.integer(5) << ',' << (step_s > 0 ? static_cast<double>(q.integer(5)) / step_s : 0.0)
            << ',' << q.real(6) << ',' << q.real(7) << ',' << q.real(8) << ',' << q.real(9) << ','
            << q.integer(10) << ',' << q.real(11) << '\n';
    }
    return true;
}

std::vector<LossPoint> RunStore::loss_curve(int64_t run_id) {
    std::lock_guard lock(m_mutex);
    // Weighted like the engine's step over all devices: a pipeline's first stages compute no
    // loss (NULL), and an uneven split gives devices different sample counts.
    Statement q(m_db,
                "SELECT step, MAX(wall_s), SUM(loss * samples), "
                "SUM(CASE WHEN loss IS NULL THEN 0 ELSE samples END), AVG(loss) "
                "FROM records WHERE run_id = ? GROUP BY step ORDER BY step",
                m_path);
    q.bind(1, run_id);
    std::vector<LossPoint> out;
    while (q.step()) {
        LossPoint p;
        p.step = q.integer(0);
        p.wall_s = q.real(1);
        if (q.is_null(4)) p.loss = std::nan("");
        else if (q.integer(3) > 0) p.loss = q.real(2) / static_cast<double>(q.integer(3));
        else p.loss = q.real(4);
        out.push_back(p);
    }
    return out;
}

std::vector<DeviceStats> RunStore::device_stats(int64_t run_id) {
    std::lock_guard lock(m_mutex);
    Statement q(m_db,
                "SELECT device, COUNT(*), SUM(samples), MAX(wall_s), MAX(memory_bytes) FROM records "
                "WHERE run_id = ? GROUP BY device ORDER BY device",
                m_path);
    q.bind(1, run_id);
    std::vector<DeviceStats> out;
    while (q.step()) {
        DeviceStats d;
        d.device = q.text(0);
        d.steps = q.integer(1);
        d.samples = q.integer(2);
        d.wall_s = q.real(3);
        d.samples_per_s = d.wall_s > 0 ? static_cast<double>(d.samples) / d.wall_s : 0.0;
        d.max_memory_bytes = q.integer(4);
        out.push_back(std::move(d));
    }
    return out;
}

bool RunStore::set_notes(int64_t run_id, const std::string& notes) {
    std::lock_guard lock(m_mutex);
    Statement s(m_db, "UPDATE runs SET notes = ? WHERE run_id = ?", m_path);
    s.bind(1, notes).bind(2, run_id).step();
    return sqlite3_changes(m_db) > 0;
}

bool RunStore::delete_run(int64_t run_id) {
    std::lock_guard lock(m_mutex);
    // Every table by hand: a store migrated from schema 1 has no ON DELETE CASCADE on records.
    return in_write_transaction([&] {
        for (const char* sql : {"DELETE FROM spans WHERE run_id = ?", "DELETE FROM evaluations WHERE run_id = ?",
                                "DELETE FROM records WHERE run_id = ?"}) {
            Statement s(m_db, sql, m_path);
            s.bind(1, run_id).step();
        }
        Statement s(m_db, "DELETE FROM runs WHERE run_id = ?", m_path);
        s.bind(1, run_id).step();
        const bool found = sqlite3_changes(m_db) > 0;
        return found;
    });
}

// ---- RunRecorder -----------------------------------------------------------------------------

RunRecorder::RunRecorder(RunStore& store, json config)
    : m_store(store), m_config(std::move(config)), m_writer([this] { writer_loop(); }) {}

RunRecorder::~RunRecorder() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_wake.notify_all();
    m_writer.join();
}

template <class F>
bool RunRecorder::write(F&& f, bool after_full) {
    {
        std::lock_guard lock(m_mutex);
        if (m_disk_full && !after_full) return false;
    }
    try {
        f();
        return true;
    } catch (const StoreError& e) {
        bool first_full = false;
        {
            std::lock_guard lock(m_mutex);
            if (e.disk_full() && !m_disk_full) {
                m_disk_full = first_full = true;
                m_error = std::string("disk full: ") + e.what() +
                          "; nothing more of the run could be stored, and the rows written before stay";
            } else if (m_error.empty()) {
                m_error = e.what();
            }
        }
        if (first_full && m_on_disk_full) m_on_disk_full();
        return false;
    }
}

void RunRecorder::on_start(const config::Experiment& e, int64_t) {
    // The devices as run: in an MPI job, every process's (the file lists one process's).
    if (m_config.is_object()) m_config["devices"] = e.devices;
    {
        std::lock_guard lock(m_mutex);
        m_device_count = e.devices.size();
    }
    try {
        if (m_resume_id) {
            if (!m_store.reopen_run(m_resume_id, m_resume_after ? m_resume_after() : 0))
                throw StoreError(m_store.path() + ": run " + std::to_string(m_resume_id) + " is not in the store");
            m_run_id = m_resume_id;
            return;
        }
        m_run_id = m_store.create_run(e, m_config);
    } catch (const StoreError& err) {
        if (!err.disk_full()) throw;
        write([&] { throw err; });  // noted as the disk-full failure; the run is not recorded
    }
}

void RunRecorder::on_span(const config::Span& s) {
    std::lock_guard lock(m_mutex);
    if (!m_disk_full) m_span_queue.push_back(s);
}

void RunRecorder::on_step(const config::StepRecord& r) {
    std::lock_guard lock(m_mutex);
    if (m_disk_full) return;
    m_queue.push_back(r);
    int64_t& latest = m_latest[r.device];
    latest = std::max(latest, r.step);
    if (m_queue.size() >= 512) m_wake.notify_all();
}

void RunRecorder::on_eval(const config::EvalResult& r) {
    if (m_run_id) write([&] { m_store.add_eval(m_run_id, r); });
}

void RunRecorder::on_finish(const config::RunSummary& s) {
    {
        std::unique_lock lock(m_mutex);
        flush_queue(lock, true);
    }
    if (!m_run_id) return;
    const config::RunSummary recorded = as_recorded(s);
    if (!disk_full()) {
        m_store.finish_run(m_run_id, recorded.status, summary_json(recorded, m_run_id));
        return;
    }
    // Its end is a row that exists: an update in place usually finds room where the failed
    // batch was. When even that fails, the run stays `running` until its process is gone, and
    // is then reported `interrupted`.
    write([&] { m_store.finish_run(m_run_id, recorded.status, summary_json(recorded, m_run_id)); }, true);
}

void RunRecorder::writer_loop() {
    std::unique_lock lock(m_mutex);
    while (!m_stop) {
        m_wake.wait_for(lock, std::chrono::milliseconds(200));
        flush_queue(lock);
    }
    flush_queue(lock, true);
}

void RunRecorder::flush() {
    std::unique_lock lock(m_mutex);
    flush_queue(lock);
}

void RunRecorder::flush_queue(std::unique_lock<std::mutex>& lock, bool all) {
    if ((m_queue.empty() && m_span_queue.empty()) || m_run_id == 0 || m_disk_full) return;
    std::vector<config::StepRecord> batch;
    std::vector<config::Span> spans;
    // A device that records no steps (or falls far behind) must not hold the others back: past
    // 4,096 queued records everything is written.
    if (all || m_queue.size() >= 4096) {
        batch.swap(m_queue);
    } else {
        // The newest step every device has reached; records past it wait for the next write.
        int64_t whole = 0;
        if (m_latest.size() >= m_device_count && !m_latest.empty()) {
            whole = m_latest.begin()->second;
            for (const auto& [device, step] : m_latest) whole = std::min(whole, step);
        }
        std::vector<config::StepRecord> later;
        for (auto& r : m_queue) (r.step <= whole ? batch : later).push_back(std::move(r));
        m_queue.swap(later);
    }
    spans.swap(m_span_queue);
    if (batch.empty() && spans.empty()) return;
    lock.unlock();  // training goes on queueing while the transaction is written
    write([&] {
        m_store.add_records(m_run_id, batch);
        m_store.add_spans(m_run_id, spans);
    });
    lock.lock();
}

std::string RunRecorder::write_error() {
    std::lock_guard lock(m_mutex);
    return m_error;
}

bool RunRecorder::disk_full() {
    std::lock_guard lock(m_mutex);
    return m_disk_full;
}

config::RunSummary RunRecorder::as_recorded(config::RunSummary s) {
    std::lock_guard lock(m_mutex);
    if (m_disk_full && s.status != "failed") {
        s.status = "failed";
        s.error = m_error;
    }
    return s;
}

json summary_json(const config::RunSummary& s, int64_t run_id) {
    json j{{"run_id", run_id ? json(run_id) : json(nullptr)},
           {"status", s.status},
           {"name", s.name},
           {"strategy", s.strategy},
           {"devices", s.devices},
           {"steps", s.steps},
           {"epochs", s.epochs},
           {"final_loss", s.final_loss},
           {"test_loss", s.test_loss ? json(*s.test_loss) : json(nullptr)},
           {"test_accuracy", s.test_accuracy ? json(*s.test_accuracy) : json(nullptr)},
           {"samples_per_s", s.samples_per_s},
           {"wall_s", s.wall_s},
           {"peak_memory_bytes", s.peak_memory_bytes},
           {"parameters", s.parameters}};
    if (!s.error.empty()) j["error"] = s.error;
    return j;
}

}  // namespace paralab::store
