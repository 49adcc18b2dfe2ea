#include "engine/store/run_store.h"

#include <sqlite3.h>

#include <algorithm>
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
#include <tuple>
#include <type_traits>
#include <pwd.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/run/json_reader.h"
#include "engine/util/printable.h"

namespace paralab::store {

using nlohmann::json;

bool StoreError::disk_full() const { return m_code == SQLITE_FULL; }

namespace {

// A record's mixture-of-experts routing as the `moe` column holds it, and back; a value that is
// not such JSON reads as no routing (the column is the store's own).
std::string moe_text(const std::vector<config::MoERecord>& moe) {
    json out = json::array();
    for (const config::MoERecord& m : moe)
        out.push_back(json{{"layer", m.layer},
                           {"tokens_per_expert", m.tokens_per_expert},
                           {"dropped_tokens", m.dropped_tokens},
                           {"aux_loss", std::isfinite(m.aux_loss) ? json(m.aux_loss) : json(nullptr)},
                           {"router_z_loss", std::isfinite(m.router_z_loss) ? json(m.router_z_loss) : json(nullptr)}});
    return out.dump();
}

std::vector<config::MoERecord> moe_from_text(const std::string& text) {
    std::vector<config::MoERecord> out;
    const json j = json::parse(text, nullptr, false);
    if (!j.is_array()) return out;
    for (const json& m : j) {
        if (!m.is_object()) continue;
        config::MoERecord r;
        r.layer = m.value("layer", std::string());
        const json& tokens = m.contains("tokens_per_expert") ? m.at("tokens_per_expert") : json();
        if (tokens.is_array())
            for (const json& n : tokens) r.tokens_per_expert.push_back(n.is_number_integer() ? n.get<int64_t>() : 0);
        r.dropped_tokens = m.value("dropped_tokens", int64_t{0});
        const auto number = [&](const char* key) {
            return m.contains(key) && m.at(key).is_number() ? m.at(key).get<double>() : std::nan("");
        };
        r.aux_loss = number("aux_loss");
        r.router_z_loss = number("router_z_loss");
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace

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
    sqlite3_stmt* raw() const { return m_stmt; }
    int type(int c) const { return sqlite3_column_type(m_stmt, c); }
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

// The device and inode of the file at `path`; {0, 0} when there is none.
std::pair<uint64_t, uint64_t> file_identity(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) != 0) return {0, 0};
    return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

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

// A stored row read by value: each column's type checked before it is taken, each JSON text
// parsed with its depth bounded. The first failure is kept (a row is skipped or refused whole).
class RowReader {
public:
    explicit RowReader(sqlite3_stmt* stmt) : m_stmt(stmt) {}
    const std::string& failure() const { return m_failure; }

    // A TEXT column (NULL only where `nullable`; "" then).
    std::string text(int c, const char* name, bool nullable = false) {
        const int type = sqlite3_column_type(m_stmt, c);
        if (type == SQLITE_NULL && nullable) return {};
        if (type != SQLITE_TEXT) return fail(name, "expected text, got " + type_name(type)), std::string();
        const int bytes = sqlite3_column_bytes(m_stmt, c);
        if (bytes > kMaxStoredValueBytes)
            return fail(name, std::to_string(bytes) + " bytes, more than a stored value may hold (" +
                                  std::to_string(kMaxStoredValueBytes >> 20) + " MiB)"),
                   std::string();
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(m_stmt, c));
        return p ? std::string(p, static_cast<size_t>(bytes)) : std::string();
    }
    int64_t integer(int c, const char* name) {
        const int type = sqlite3_column_type(m_stmt, c);
        if (type != SQLITE_INTEGER) return fail(name, "expected an integer, got " + type_name(type)), 0;
        return sqlite3_column_int64(m_stmt, c);
    }
    // A REAL column (an INTEGER is taken as a number too); NaN for NULL where `nullable`.
    double number(int c, const char* name, bool nullable = false) {
        const int type = sqlite3_column_type(m_stmt, c);
        if (type == SQLITE_NULL && nullable) return std::nan("");
        if (type != SQLITE_FLOAT && type != SQLITE_INTEGER)
            return fail(name, "expected a number, got " + type_name(type)), 0.0;
        return sqlite3_column_double(m_stmt, c);
    }
    // A JSON text: an object, or (where `nullable`) NULL or the JSON null.
    json object(int c, const char* name, bool nullable) {
        const int type = sqlite3_column_type(m_stmt, c);
        if (type == SQLITE_NULL && nullable) return nullptr;
        const std::string t = text(c, name);
        if (!m_failure.empty()) return nullptr;
        json j;
        try {
            j = run::parse_json_text(t, name);
        } catch (const ConfigError& e) {
            return fail(e.what()), json();
        }
        if (!j.is_object() && !(nullable && j.is_null()))
            return fail(name, "expected a JSON object, got " + run::describe_json(j)), json();
        return j;
    }
    std::vector<std::string> devices(int c) {
        const std::string t = text(c, "devices");
        if (!m_failure.empty()) return {};
        json j;
        try {
            j = run::parse_json_text(t, "devices");
        } catch (const ConfigError& e) {
            return fail(e.what()), std::vector<std::string>();
        }
        std::vector<std::string> out;
        if (j.is_array())
            for (const json& d : j) {
                if (!d.is_string()) break;
                out.push_back(d.get<std::string>());
            }
        if (!j.is_array() || out.size() != j.size())
            return fail("devices", "expected a list of device names, got " + run::describe_json(j)), std::vector<std::string>();
        return out;
    }
    void fail(const std::string& name, const std::string& why) { fail(name + ": " + why); }
    void fail(const std::string& why) {
        if (m_failure.empty()) m_failure = why;
    }

private:
    static std::string type_name(int type) {
        switch (type) {
            case SQLITE_NULL: return "NULL";
            case SQLITE_INTEGER: return "an integer";
            case SQLITE_FLOAT: return "a number";
            case SQLITE_TEXT: return "text";
            default: return "a blob";
        }
    }
    sqlite3_stmt* m_stmt;
    std::string m_failure;
};

const std::set<std::string> kStatuses = {"running", "finished", "stopped", "interrupted", "failed"};

// The columns of list_runs' and get_run's query, in order.
std::string run_columns(bool has_author) {
    return std::string("run_id, name, status, strategy, devices, created_at, finished_at, summary, config, notes, ") +
           (has_author ? "author" : "''");
}

// A row of run_columns() into `r`; the cause when it does not read.
std::string read_run_row(sqlite3_stmt* stmt, RunRow& r) {
    RowReader row(stmt);
    r.run_id = row.integer(0, "run_id");
    r.name = row.text(1, "name");
    r.status = row.text(2, "status");
    if (row.failure().empty() && !kStatuses.count(r.status))
        row.fail("status", "expected running, finished, stopped, interrupted or failed, got \"" +
                               printable(r.status.substr(0, 40)) + "\"");
    r.strategy = row.text(3, "strategy");
    r.devices = row.devices(4);
    r.created_at = row.text(5, "created_at");
    r.finished_at = row.text(6, "finished_at", true);
    r.summary = row.object(7, "summary", true);
    r.config = row.object(8, "config", true);
    r.notes = row.text(9, "notes");
    r.author = row.text(10, "author");
    return row.failure();
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
                                         const std::vector<int64_t>& ids) {
    std::vector<int64_t> copied;
    for (const int64_t id : ids) {
        const std::string sql = "INSERT INTO " + to +
                                ".runs (name, status, strategy, devices, config, created_at, finished_at, summary, "
                                "notes, pid, host, author) SELECT name, CASE status WHEN 'running' THEN 'interrupted' "
                                "ELSE status END, strategy, devices, config, created_at, finished_at, summary, notes, "
                                "NULL, host, author FROM " + from + ".runs WHERE run_id = ?";
        Statement(m_db, sql.c_str(), m_path).bind(1, id).step();
        if (sqlite3_changes(m_db) == 0) throw StoreError(m_path + ": run " + std::to_string(id) + " is not in the store");
        const int64_t copy = sqlite3_last_insert_rowid(m_db);
        std::vector<std::string> rows = {
            "INSERT INTO " + to + ".records (run_id, step, device, epoch, wall_s, loss, samples, compute_ms, "
                "comm_ms, idle_ms, data_wait_ms, memory_bytes, lr, moe) SELECT ?, step, device, epoch, wall_s, loss, "
                "samples, compute_ms, comm_ms, idle_ms, data_wait_ms, memory_bytes, lr, moe FROM " + from +
                ".records WHERE run_id = ?",
            "INSERT INTO " + to + ".evaluations (run_id, step, loss, accuracy, samples) SELECT ?, step, loss, "
                "accuracy, samples FROM " + from + ".evaluations WHERE run_id = ?"};
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
            check_same_file();
            exec("COMMIT");
        } else {
            auto result = body();
            check_same_file();
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
            copied = copy_runs("main", "dest", ids);
        });
    } catch (...) {
        sqlite3_exec(m_db, "DETACH DATABASE dest", nullptr, nullptr, nullptr);
        remove_dest();
        throw;
    }
    exec("DETACH DATABASE dest");
    return copied;
}

namespace {

// How a column of a record, an evaluation or a span is checked and written anew.
enum class Column { integer, number, optional_number, text };

// Binds column `c` of the source's row to parameter `p` of `insert`, checked against `kind`;
// records a failure in `row` when it does not fit.
void copy_value(RowReader& row, sqlite3_stmt* from, int c, const char* name, Column kind, Statement& insert, int p) {
    switch (kind) {
        case Column::integer: insert.bind(p, row.integer(c, name)); break;
        case Column::text: insert.bind(p, row.text(c, name)); break;
        case Column::number:
        case Column::optional_number: {
            const double v = row.number(c, name, kind == Column::optional_number);
            if (std::isnan(v) && sqlite3_column_type(from, c) == SQLITE_NULL) insert.bind_null(p);
            else if (!std::isfinite(v)) row.fail(name, "not a finite number");
            else insert.bind(p, v);
            break;
        }
    }
}

struct TableCopy {
    const char* table;
    std::vector<std::pair<const char*, Column>> columns;  // after run_id
};

const std::vector<TableCopy> kRunTables = {
    {"records",
     {{"step", Column::integer}, {"device", Column::text}, {"epoch", Column::integer}, {"wall_s", Column::number},
      {"loss", Column::optional_number}, {"samples", Column::integer}, {"compute_ms", Column::number},
      {"comm_ms", Column::number}, {"idle_ms", Column::number}, {"data_wait_ms", Column::number},
      {"memory_bytes", Column::integer}, {"lr", Column::optional_number}}},
    {"evaluations",
     {{"step", Column::integer}, {"loss", Column::optional_number}, {"accuracy", Column::optional_number},
      {"samples", Column::integer}}},
    {"spans",
     {{"device", Column::text}, {"step", Column::integer}, {"phase", Column::text}, {"t_begin", Column::number},
      {"t_end", Column::number}, {"bytes", Column::integer}}},
};

}  // namespace

std::vector<int64_t> RunStore::import_runs(const std::string& source) {
    std::error_code ec;
    if (std::filesystem::equivalent(source, m_path, ec))
        throw StoreError(source + ": that is this run store itself");
    // Its own connection, read-only and checked (Access::untrusted): nothing of the file runs
    // here, and its values reach this store only as values bound one by one.
    RunStore src(source, Access::untrusted);
    const bool author = src.has_column("main", "runs", "author"), spans = src.has_column("main", "spans", "run_id");
    std::lock_guard lock(m_mutex);
    std::lock_guard source_lock(src.m_mutex);
    const auto refuse = [&](int64_t id, const std::string& why) {
        return StoreError(source + ": run " + std::to_string(id) + " cannot be imported: " + why +
                          "; nothing was imported");
    };
    std::vector<int64_t> copied;
    try {
        in_write_transaction([&] {
            Statement runs(src.m_db, ("SELECT " + run_columns(author) + ", host FROM runs ORDER BY run_id").c_str(),
                           src.m_path);
            Statement insert(m_db,
                             "INSERT INTO runs (name, status, strategy, devices, config, created_at, finished_at, "
                             "summary, notes, pid, host, author) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
                             m_path);
            while (runs.step()) {
                RunRow r;
                std::string why = read_run_row(runs.raw(), r);
                RowReader extra(runs.raw());
                const std::string host = extra.text(11, "host", true);
                if (why.empty()) why = extra.failure();
                if (!why.empty()) throw refuse(r.run_id, why);
                insert.bind(1, r.name).bind(2, r.status == "running" ? std::string("interrupted") : r.status);
                insert.bind(3, r.strategy).bind(4, json(r.devices).dump()).bind(5, r.config.dump());
                insert.bind(6, r.created_at);
                if (r.finished_at.empty()) insert.bind_null(7);
                else insert.bind(7, r.finished_at);
                if (r.summary.is_null()) insert.bind_null(8);
                else insert.bind(8, r.summary.dump());
                insert.bind(9, r.notes).bind(10, host).bind(11, r.author).step();
                insert.reset();
                const int64_t copy = sqlite3_last_insert_rowid(m_db);
                for (const TableCopy& t : kRunTables) {
                    if (std::string(t.table) == "spans" && !spans) continue;
                    std::string columns, marks = "?";
                    for (const auto& [name, kind] : t.columns) {
                        columns += columns.empty() ? "" : ", ";
                        columns += name;
                        marks += ", ?";
                    }
                    Statement rows(src.m_db,
                                   ("SELECT " + columns + " FROM " + t.table + " WHERE run_id = ?").c_str(),
                                   src.m_path);
                    rows.bind(1, r.run_id);
                    Statement into(m_db,
                                   ("INSERT INTO " + std::string(t.table) + " (run_id, " + columns + ") VALUES (" +
                                    marks + ")").c_str(),
                                   m_path);
                    while (rows.step()) {
                        RowReader row(rows.raw());
                        into.bind(1, copy);
                        for (size_t k = 0; k < t.columns.size(); ++k)
                            copy_value(row, rows.raw(), static_cast<int>(k), t.columns[k].first, t.columns[k].second,
                                       into, static_cast<int>(k) + 2);
                        if (!row.failure().empty()) throw refuse(r.run_id, std::string(t.table) + "." + row.failure());
                        into.step();
                        into.reset();
                    }
                }
                copied.push_back(copy);
            }
        });
    } catch (const StoreError& e) {
        const std::string what = e.what();
        if (what.find("cannot be imported") != std::string::npos || e.replaced()) throw;
        throw StoreError(source + ": cannot be imported (" + what + "); nothing was imported", e.code());
    }
    return copied;
}

std::string RunStore::default_path() {
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg)
        return std::string(xdg) + "/ParaLab/runs.db";
    const char* home = std::getenv("HOME");
    return std::string(home && *home ? home : ".") + "/.local/share/ParaLab/runs.db";
}

RunStore::RunStore(const std::string& path, Access access)
    : m_path(path), m_untrusted(access == Access::untrusted) {
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
        check_schema_objects(m_untrusted);
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
        std::tie(m_file_device, m_file_inode) = file_identity(path);
        if (m_file_inode == 0) throw StoreError(path + ": the run store went away while it was opened", 0, true);
        m_writable = true;
        migrate();
        std::tie(m_wal_device, m_wal_inode) = file_identity(path + "-wal");
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
    harden_connection();
}

void RunStore::harden_connection() {
    // SQLite's settings for a database that may come from anywhere: no writes to the schema
    // itself, no function named in the file's schema (a view, a default, a generated column)
    // runs, and a value larger than a store's longest is an error, not an allocation.
    sqlite3_db_config(m_db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
    sqlite3_db_config(m_db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
    if (m_untrusted) {
        sqlite3_limit(m_db, SQLITE_LIMIT_LENGTH, kMaxStoredValueBytes);
        sqlite3_limit(m_db, SQLITE_LIMIT_SQL_LENGTH, 1 << 20);
    }
}

void RunStore::check_same_file() {
    if (!m_writable) return;
    const auto [device, inode] = file_identity(m_path);
    if (inode == 0)
        throw StoreError(m_path + ": the run store file was deleted while this process was writing it; nothing "
                                  "more is written",
                         0, true);
    if (device != m_file_device || inode != m_file_inode)
        throw StoreError(m_path + ": the run store file was replaced by another file while this process was "
                                  "writing it; nothing more is written, and the file there is left as it is",
                         0, true);
}

void RunStore::check_schema_objects(bool untrusted) {
    std::lock_guard lock(m_mutex);
    const auto refuse = [&](const std::string& why) {
        return StoreError(m_path + ": not a ParaLab run store (" + why + "); it was left as it was");
    };
    const std::set<std::string> ours = {"runs", "records", "evaluations", "spans"};
    Statement q(m_db, "SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master", m_path);
    std::vector<std::string> tables;
    while (q.step()) {
        const std::string type = q.text(0), name = q.text(1), table = q.text(2), sql = q.text(3);
        const bool of_ours = ours.count(name) || ours.count(table);
        if ((type == "view" || type == "trigger") && (untrusted || of_ours))
            throw refuse("it holds a " + type + ", " + printable(name.substr(0, 64)) + "; a run store has none");
        if (type == "table" && of_ours) {
            std::string head = sql.substr(0, 32);
            for (char& ch : head) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
            if (head.find("VIRTUAL") != std::string::npos)
                throw refuse("its table " + name + " is a virtual table");
            tables.push_back(name);
        }
    }
    for (const std::string& table : tables) {
        // table_xinfo's hidden: 2 and 3 are generated columns (virtual, stored).
        Statement c(m_db, ("SELECT name FROM pragma_table_xinfo('" + table + "') WHERE hidden IN (2, 3)").c_str(), m_path);
        if (c.step())
            throw refuse("its column " + table + "." + printable(c.text(0).substr(0, 64)) +
                         " is generated; a run store keeps values only");
    }
    if (!untrusted) return;
    Statement check(m_db, "PRAGMA quick_check(5)", m_path);
    std::string problems;
    while (check.step())
        if (check.text(0) != "ok") problems += (problems.empty() ? "" : "; ") + check.text(0);
    if (!problems.empty())
        throw StoreError(m_path + ": the file is damaged (SQLite's quick_check: " + printable(problems.substr(0, 300)) +
                         "); it was left as it was");
}

RunStore::~RunStore() {
    // SQLite neither checkpoints nor removes the write-ahead log of a file that was moved or
    // deleted: left at PATH-wal, that log would be read, and checkpointed, as the log of the
    // file now at PATH. It is this connection's own (the inode it had), so it goes with it.
    const bool moved = m_writable && file_identity(m_path) != std::pair{m_file_device, m_file_inode};
    sqlite3_close(m_db);
    if (moved && m_wal_inode != 0 && file_identity(m_path + "-wal") == std::pair{m_wal_device, m_wal_inode}) {
        ::unlink((m_path + "-wal").c_str());
        ::unlink((m_path + "-shm").c_str());
    }
}

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
        // A step's mixture-of-experts routing, as JSON (NULL without).
        if (version < 5) {
            exec("ALTER TABLE records ADD COLUMN moe TEXT");
            exec("PRAGMA user_version = 5");
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
    check_same_file();
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
    check_same_file();
    Statement s(m_db, "UPDATE runs SET status = ?, summary = ?, finished_at = ? WHERE run_id = ?", m_path);
    s.bind(1, status).bind(2, summary.dump()).bind(3, now_iso8601()).bind(4, run_id);
    s.step();
}

std::string RunStore::claim_for_resume(int64_t run_id) {
    std::lock_guard lock(m_mutex);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    const std::string run = "run " + std::to_string(run_id);
    return in_write_transaction([&] {
        Statement read(m_db, "SELECT status FROM runs WHERE run_id = ?", m_path);
        read.bind(1, run_id);
        if (!read.step()) throw StoreError(m_path + ": " + run + " is not in the store");
        const std::string previous = read.text(0);
        // The one change from a resumable status to running: a second resume finds it running.
        Statement claim(m_db,
                        "UPDATE runs SET status = 'running', pid = ?, host = ? WHERE run_id = ? AND status IN "
                        "('stopped', 'interrupted', 'failed')",
                        m_path);
        claim.bind(1, static_cast<int64_t>(getpid())).bind(2, std::string(host)).bind(3, run_id).step();
        if (sqlite3_changes(m_db) == 1) return previous;
        if (previous == "running") throw StoreError(run + " is running (another process trains it); it is not resumed twice");
        if (previous == "finished") throw StoreError(run + " already finished; nothing to resume");
        throw StoreError(run + " is " + printable(previous.substr(0, 40)) +
                         "; only a stopped, interrupted or failed run resumes");
    });
}

void RunStore::release_claim(int64_t run_id, const std::string& previous) {
    std::lock_guard lock(m_mutex);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    check_same_file();
    Statement s(m_db, "UPDATE runs SET status = ? WHERE run_id = ? AND status = 'running' AND pid = ? AND host = ?",
                m_path);
    s.bind(1, previous).bind(2, run_id).bind(3, static_cast<int64_t>(getpid())).bind(4, std::string(host)).step();
}

bool RunStore::reopen_run(int64_t run_id, int64_t after_step) {
    std::lock_guard lock(m_mutex);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return in_write_transaction([&] {
        // Only the process that claimed the run reopens it.
        Statement s(m_db,
                    "UPDATE runs SET summary = NULL, finished_at = NULL WHERE run_id = ? AND status = 'running' "
                    "AND pid = ? AND host = ?",
                    m_path);
        s.bind(1, run_id).bind(2, static_cast<int64_t>(getpid())).bind(3, std::string(host)).step();
        if (sqlite3_changes(m_db) == 0) return false;
        for (const char* sql : {"DELETE FROM spans WHERE run_id = ? AND step > ?",
                                "DELETE FROM evaluations WHERE run_id = ? AND step > ?",
                                "DELETE FROM records WHERE run_id = ? AND step > ?"}) {
            Statement d(m_db, sql, m_path);
            d.bind(1, run_id).bind(2, after_step).step();
        }
        return true;
    });
}

void RunStore::add_records(int64_t run_id, const std::vector<config::StepRecord>& records) {
    if (records.empty()) return;
    std::lock_guard lock(m_mutex);
    in_write_transaction([&] {
        Statement s(m_db,
                    "INSERT OR REPLACE INTO records (run_id, step, device, epoch, wall_s, loss, samples, "
                    "compute_ms, comm_ms, idle_ms, data_wait_ms, memory_bytes, lr, moe) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    m_path);
        for (const auto& r : records) {
            s.bind(1, run_id).bind(2, r.step).bind(3, r.device).bind(4, r.epoch).bind(5, r.wall_s);
            if (std::isfinite(r.loss)) s.bind(6, r.loss);
            else s.bind_null(6);
            s.bind(7, r.samples).bind(8, r.compute_ms).bind(9, r.comm_ms).bind(10, r.idle_ms);
            // The step's peak (activations included); a record without one, what was live at its end.
            const int64_t memory = r.memory.step_peak_total > 0 ? r.memory.step_peak_total : r.memory.current_total;
            s.bind(11, r.data_wait_ms).bind(12, memory).bind(13, r.lr);
            if (r.moe.empty()) s.bind_null(14);
            else s.bind(14, moe_text(r.moe));
            s.step();
            s.reset();
        }
    });
}

void RunStore::add_eval(int64_t run_id, const config::EvalResult& ev) {
    std::lock_guard lock(m_mutex);
    check_same_file();
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

std::vector<RunRow> RunStore::list_runs(std::vector<SkippedRun>* skipped) {
    std::lock_guard lock(m_mutex);
    // A read-only store of an older schema has no author column.
    if (!m_has_author) m_has_author = has_column("main", "runs", "author");
    const std::string sql = "SELECT " + run_columns(*m_has_author) + " FROM runs ORDER BY run_id";
    Statement q(m_db, sql.c_str(), m_path);
    std::vector<RunRow> rows;
    while (q.step()) {
        RunRow r;
        const std::string why = read_run_row(q.raw(), r);
        if (!why.empty()) {
            if (skipped) skipped->push_back({q.integer(0), why});
            continue;
        }
        if (r.status == "running" && m_interrupted.count(r.run_id)) r.status = "interrupted";
        rows.push_back(std::move(r));
    }
    return rows;
}

std::optional<RunRow> RunStore::get_run(int64_t run_id) {
    std::optional<RunRow> row;
    {
        std::lock_guard lock(m_mutex);
        if (!m_has_author) m_has_author = has_column("main", "runs", "author");
        const std::string sql = "SELECT " + run_columns(*m_has_author) + " FROM runs WHERE run_id = ?";
        Statement q(m_db, sql.c_str(), m_path);
        q.bind(1, run_id);
        if (!q.step()) return std::nullopt;
        RunRow r;
        const std::string why = read_run_row(q.raw(), r);
        if (!why.empty())
            throw StoreError(m_path + ": run " + std::to_string(run_id) + " cannot be read: " + why);
        if (r.status == "running" && m_interrupted.count(r.run_id)) r.status = "interrupted";
        row = std::move(r);
    }
    if (!row->summary.is_null()) return row;
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

std::vector<MoEPoint> RunStore::moe_curve(int64_t run_id) {
    std::lock_guard lock(m_mutex);
    Statement q(m_db, "SELECT step, moe FROM records WHERE run_id = ? AND moe IS NOT NULL ORDER BY step, device",
                m_path);
    q.bind(1, run_id);
    std::vector<MoEPoint> out;
    while (q.step()) {
        const int64_t step = q.integer(0);
        if (out.empty() || out.back().step != step) out.push_back(MoEPoint{step, {}});
        std::vector<config::MoERecord>& into = out.back().layers;
        for (const config::MoERecord& m : moe_from_text(q.text(1))) config::add_moe_record(into, m);
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
    check_same_file();
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
        if (m_replaced || (m_disk_full && !after_full)) return false;
    }
    try {
        f();
        return true;
    } catch (const StoreError& e) {
        bool first_failure = false;
        {
            std::lock_guard lock(m_mutex);
            const bool failed_before = m_disk_full || m_replaced;
            if (e.replaced() && !m_replaced) {
                m_replaced = true;
                first_failure = !failed_before;
                m_error = e.what();
            } else if (e.disk_full() && !failed_before) {
                m_disk_full = first_failure = true;
                m_error = std::string("disk full: ") + e.what() +
                          "; nothing more of the run could be stored, and the rows written before stay";
            } else if (m_error.empty()) {
                m_error = e.what();
            }
        }
        if (first_failure && m_on_store_failed) m_on_store_failed();
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
            if (!m_resume_claimed) m_store.claim_for_resume(m_resume_id);
            m_resume_claimed = true;
            if (!m_store.reopen_run(m_resume_id, m_resume_after ? m_resume_after() : 0))
                throw StoreError(m_store.path() + ": run " + std::to_string(m_resume_id) +
                                 " is no longer held by this process (another resumed it, or it was deleted)");
            m_run_id = m_resume_id;
            return;
        }
        m_run_id = m_store.create_run(e, m_config);
    } catch (const StoreError& err) {
        if (!err.disk_full() && !err.replaced()) throw;
        write([&] { throw err; });  // noted as the disk-full failure; the run is not recorded
    }
}

void RunRecorder::on_span(const config::Span& s) {
    std::lock_guard lock(m_mutex);
    if (!m_disk_full && !m_replaced) m_span_queue.push_back(s);
}

void RunRecorder::on_step(const config::StepRecord& r) {
    std::lock_guard lock(m_mutex);
    if (m_disk_full || m_replaced) return;
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
    if (!store_failed()) {
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
    if ((m_queue.empty() && m_span_queue.empty()) || m_run_id == 0 || m_disk_full || m_replaced) return;
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

bool RunRecorder::store_failed() {
    std::lock_guard lock(m_mutex);
    return m_disk_full || m_replaced;
}

config::RunSummary RunRecorder::as_recorded(config::RunSummary s) {
    std::lock_guard lock(m_mutex);
    if ((m_disk_full || m_replaced) && s.status != "failed") {
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
