// What the run-store tests share: a temporary folder, a one-device experiment to record, and a
// store as the first ParaLab (schema version 1) wrote it, for the migration tests.
#pragma once

#include <gtest/gtest.h>

#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "engine/config/experiment.h"

namespace store_testing {

// An experiment named `name` on cpu:0, as a run's record needs one.
inline paralab::config::Experiment experiment(const std::string& name) {
    paralab::config::Experiment e;
    e.name = name;
    e.devices = {"cpu:0"};
    return e;
}

struct TempDir {
    std::filesystem::path path;
    TempDir() {
        char tmpl[] = "/tmp/paralab_store_XXXXXX";
        path = mkdtemp(tmpl);
    }
    ~TempDir() { std::filesystem::remove_all(path); }
};

// Writes at `path` the version-1 schema (no foreign keys, so nothing cascades) with one run,
// 'old', then `rows` (more SQL: records, evaluations of run 1).
inline void write_version1_store(const std::string& path, const std::string& rows = "") {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    const std::string sql =
        "CREATE TABLE runs (run_id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, "
        "status TEXT NOT NULL, strategy TEXT NOT NULL, devices TEXT NOT NULL, config TEXT "
        "NOT NULL, created_at TEXT NOT NULL, finished_at TEXT, summary TEXT, notes TEXT NOT "
        "NULL DEFAULT '', pid INTEGER, host TEXT);"
        "CREATE TABLE records (run_id INTEGER NOT NULL, step INTEGER NOT NULL, device TEXT "
        "NOT NULL, epoch INTEGER NOT NULL, wall_s REAL NOT NULL, loss REAL, samples INTEGER "
        "NOT NULL, compute_ms REAL NOT NULL, comm_ms REAL NOT NULL, idle_ms REAL NOT NULL, "
        "data_wait_ms REAL NOT NULL, memory_bytes INTEGER NOT NULL, lr REAL, PRIMARY KEY "
        "(run_id, step, device));"
        "CREATE TABLE evaluations (run_id INTEGER NOT NULL, step INTEGER NOT NULL, loss REAL "
        "NOT NULL, accuracy REAL, samples INTEGER NOT NULL);"
        "INSERT INTO runs (name, status, strategy, devices, config, created_at) VALUES "
        "('old', 'finished', 'single', '[\"cpu:0\"]', '{}', '2026-01-01T00:00:00Z');" +
        rows + "PRAGMA user_version = 1;";
    EXPECT_EQ(sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
    sqlite3_close(raw);
}

}  // namespace store_testing
