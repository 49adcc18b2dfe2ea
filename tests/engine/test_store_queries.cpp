// The run store's queries for the window's runs view: the loss curve over all devices (a
// pipeline's first stages compute no loss, devices may hold different sample counts), per-device
// throughput and memory, notes, and deleting a run with every row it owns — also in a store
// migrated from schema 1, whose records table has no ON DELETE CASCADE.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "engine/store/run_store.h"
#include "store_testing.h"

using namespace paralab;
namespace fs = std::filesystem;

namespace {

using store_testing::TempDir;

config::Experiment experiment(const std::string& name, std::vector<std::string> devices) {
    config::Experiment e;
    e.name = name;
    e.devices = std::move(devices);
    return e;
}

config::StepRecord record(int64_t step, const std::string& device, double loss, int64_t samples,
                       double wall_s, int64_t memory = 0) {
    config::StepRecord r;
    r.step = step;
    r.device = device;
    r.loss = loss;
    r.samples = samples;
    r.wall_s = wall_s;
    r.memory.current_total = memory;
    return r;
}

int64_t count_rows(const std::string& path, const std::string& table, int64_t run_id) {
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    const std::string sql =
        "SELECT COUNT(*) FROM " + table + " WHERE run_id = " + std::to_string(run_id);
    EXPECT_EQ(sqlite3_prepare_v2(raw, sql.c_str(), -1, &q, nullptr), SQLITE_OK);
    EXPECT_EQ(sqlite3_step(q), SQLITE_ROW);
    const int64_t n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(raw);
    return n;
}

// A run with `steps` steps on two devices, spans and an evaluation.
int64_t fill_run(store::RunStore& db, const std::string& name, int64_t steps) {
    const int64_t id = db.create_run(experiment(name, {"cpu:0", "cpu:1"}), {});
    std::vector<config::StepRecord> rows;
    std::vector<config::Span> spans;
    for (int64_t s = 1; s <= steps; ++s) {
        rows.push_back(record(s, "cpu:0", 1.0, 32, 0.1 * static_cast<double>(s)));
        rows.push_back(record(s, "cpu:1", 1.0, 32, 0.1 * static_cast<double>(s)));
        config::Span sp;
        sp.step = s;
        sp.device = "cpu:0";
        sp.phase = "forward";
        spans.push_back(sp);
    }
    db.add_records(id, rows);
    db.add_spans(id, spans);
    config::EvalResult ev;
    ev.step = steps;
    ev.loss = 0.5;
    db.add_eval(id, ev);
    return id;
}

TEST(RunStoreQueries, LossCurveIsTheStepOverAllDevices) {
    TempDir dir;
    store::RunStore db((dir.path / "runs.db").string());
    const int64_t id = db.create_run(experiment("curve", {"cpu:0", "cpu:1", "cpu:2"}), {});
    const double nan = std::nan("");
    db.add_records(
        id,
        {
            // step 1: an uneven split (48 + 16 rows) and a pipeline-like first stage with no loss
            record(1, "cpu:0", 1.0, 48, 0.10),
            record(1, "cpu:1", 2.0, 16, 0.12),
            record(1, "cpu:2", nan, 64, 0.11),
            // step 2: even
            record(2, "cpu:0", 0.5, 32, 0.20),
            record(2, "cpu:1", 0.7, 32, 0.19),
            record(2, "cpu:2", nan, 64, 0.25),
            // step 3: no device computed a loss (a diverged step is stored as NULL)
            record(3, "cpu:0", nan, 32, 0.30),
            record(3, "cpu:1", nan, 32, 0.30),
            record(3, "cpu:2", nan, 64, 0.31),
        });
    const auto curve = db.loss_curve(id);
    ASSERT_EQ(curve.size(), 3u);
    EXPECT_EQ(curve[0].step, 1);
    EXPECT_DOUBLE_EQ(curve[0].wall_s, 0.12);  // the slowest device
    EXPECT_DOUBLE_EQ(curve[0].loss, (1.0 * 48 + 2.0 * 16) / 64);
    EXPECT_DOUBLE_EQ(curve[1].wall_s, 0.25);
    EXPECT_DOUBLE_EQ(curve[1].loss, 0.6);
    EXPECT_TRUE(std::isnan(curve[2].loss));
    EXPECT_TRUE(db.loss_curve(id + 1).empty());
}

TEST(RunStoreQueries, DeviceStatsGiveThroughputAndMemoryPerDevice) {
    TempDir dir;
    store::RunStore db((dir.path / "runs.db").string());
    const int64_t id = db.create_run(experiment("devices", {"cpu:0", "cpu:1"}), {});
    db.add_records(id,
                   {record(1, "cpu:0", 1.0, 32, 0.5, 1000), record(2, "cpu:0", 1.0, 32, 1.0, 3000),
                    record(1, "cpu:1", 1.0, 16, 0.4, 500), record(2, "cpu:1", 1.0, 16, 0.8, 400)});
    const auto stats = db.device_stats(id);
    ASSERT_EQ(stats.size(), 2u);
    EXPECT_EQ(stats[0].device, "cpu:0");
    EXPECT_EQ(stats[0].steps, 2);
    EXPECT_EQ(stats[0].samples, 64);
    EXPECT_DOUBLE_EQ(stats[0].wall_s, 1.0);
    EXPECT_DOUBLE_EQ(stats[0].samples_per_s, 64.0);
    EXPECT_EQ(stats[0].max_memory_bytes, 3000);
    EXPECT_EQ(stats[1].device, "cpu:1");
    EXPECT_DOUBLE_EQ(stats[1].samples_per_s, 40.0);
    EXPECT_EQ(stats[1].max_memory_bytes, 500);
    EXPECT_TRUE(db.device_stats(id + 1).empty());
}

TEST(RunStoreQueries, NotesRoundTripAcrossReopen) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    int64_t id = 0;
    {
        store::RunStore db(path);
        id = db.create_run(experiment("noted", {"cpu:0"}), {});
        EXPECT_EQ(db.list_runs().at(0).notes, "");
        EXPECT_TRUE(db.set_notes(id, "lr too high? — try 3e-3 'quoted'"));
        EXPECT_FALSE(db.set_notes(id + 1, "nobody"));
    }
    store::RunStore db(path);
    EXPECT_EQ(db.list_runs().at(0).notes, "lr too high? — try 3e-3 'quoted'");
    EXPECT_EQ(db.get_run(id)->notes, "lr too high? — try 3e-3 'quoted'");
}

TEST(RunStoreQueries, DeleteRunRemovesItsRowsAndNoOthers) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    store::RunStore db(path);
    const int64_t gone = fill_run(db, "gone", 20);
    const int64_t kept = fill_run(db, "kept", 10);
    ASSERT_EQ(count_rows(path, "records", gone), 40);
    EXPECT_TRUE(db.delete_run(gone));
    EXPECT_FALSE(db.get_run(gone));
    for (const char* table : {"records", "evaluations", "spans"})
        EXPECT_EQ(count_rows(path, table, gone), 0) << table;
    EXPECT_EQ(count_rows(path, "records", kept), 20);
    EXPECT_EQ(count_rows(path, "spans", kept), 10);
    EXPECT_EQ(count_rows(path, "evaluations", kept), 1);
    ASSERT_EQ(db.list_runs().size(), 1u);
    EXPECT_EQ(db.list_runs()[0].name, "kept");
    EXPECT_FALSE(db.delete_run(gone));
}

TEST(RunStoreQueries, DeleteRunInAStoreMigratedFromSchema1) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    // Schema 1 had no foreign keys, so nothing cascades.
    store_testing::write_version1_store(path,
                                        "INSERT INTO records VALUES (1, 1, 'cpu:0', 0, 0.1, 0.9, 32, 1, 0, 0, 0, 0, 0.01);"
                                        "INSERT INTO evaluations VALUES (1, 1, 0.8, 0.5, 100);");
    store::RunStore db(path);
    ASSERT_EQ(db.loss_curve(1).size(), 1u);
    EXPECT_TRUE(db.delete_run(1));
    EXPECT_TRUE(db.list_runs().empty());
    EXPECT_EQ(count_rows(path, "records", 1), 0);
    EXPECT_EQ(count_rows(path, "evaluations", 1), 0);
}

}  // namespace
