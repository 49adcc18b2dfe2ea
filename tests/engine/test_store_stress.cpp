// The run store under stress and under attack: writers that meet while the store is created
// (threads, processes), a busy store that makes a writer wait, a full disk, a NaN evaluation,
// files that are not ParaLab's (by application id), a read-only file system or file, and
// processes killed at random moments of writing a run, after which the store is still whole.
// Every wait is for a condition (a pipe, a refused lock seen by the test VFS), with a bound.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "engine/store/run_store.h"
#include "store_testing.h"
#include "store_vfs_shim.h"

using namespace paralab;
namespace fs = std::filesystem;
namespace shim = store_testing::vfs_shim;

namespace {

using store_testing::experiment;
using store_testing::TempDir;

config::StepRecord record(int64_t step, double loss = 0.5) {
    config::StepRecord r;
    r.step = step;
    r.device = "cpu:0";
    r.loss = loss;
    r.samples = 32;
    r.compute_ms = 2;
    r.wall_s = 0.002 * static_cast<double>(step);
    return r;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// One value of a query on a connection of the test's own.
std::string query(const std::string& path, const std::string& sql) {
    sqlite3* raw = nullptr;
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(raw, sql.c_str(), -1, &q, nullptr) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW) {
        const auto* text = sqlite3_column_text(q, 0);
        out = text ? reinterpret_cast<const char*>(text) : "NULL";
    } else {
        out = std::string("error: ") + sqlite3_errmsg(raw);
    }
    sqlite3_finalize(q);
    sqlite3_close(raw);
    return out;
}

int64_t count(const std::string& path, const std::string& sql) { return std::stoll(query(path, sql)); }

class RunStoreStress : public ::testing::Test {
protected:
    void SetUp() override {
        shim::install();
        shim::space = INT64_MAX;
    }
    void TearDown() override { shim::space = INT64_MAX; }
    TempDir dir;
};

// An opener that finds the store created by another while it waited for the write lock ends
// its migration transaction: the run it then records is kept (it once stayed inside that
// transaction, and its rows rolled back when the store closed, though it reported "finished").
// The other opener holds the write lock with the schema written but not committed until the
// test VFS has seen this opener's BEGIN IMMEDIATE refused: the opener waits for the lock instead
// of failing, and every time meets the store created meanwhile.
TEST_F(RunStoreStress, AnOpenerThatFindsTheSchemaMadeMeanwhileKeepsItsRun) {
    // ParaLab's schema as a store of this build has it, to be written by hand below.
    const std::string model = (dir.path / "model.db").string();
    { store::RunStore db(model); }
    std::string schema;
    {
        sqlite3* raw = nullptr;
        ASSERT_EQ(sqlite3_open(model.c_str(), &raw), SQLITE_OK);
        sqlite3_stmt* q = nullptr;
        ASSERT_EQ(sqlite3_prepare_v2(raw, "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'",
                                     -1, &q, nullptr),
                  SQLITE_OK);
        while (sqlite3_step(q) == SQLITE_ROW) schema += reinterpret_cast<const char*>(sqlite3_column_text(q, 0)) + std::string(";");
        sqlite3_finalize(q);
        sqlite3_close(raw);
    }
    schema += "PRAGMA application_id = " + std::to_string(store::kApplicationId) +
              "; PRAGMA user_version = " + std::to_string(store::kSchemaVersion) + ";";

    for (int round = 0; round < 3; ++round) {
        const std::string path = (dir.path / ("new" + std::to_string(round) + ".db")).string();
        sqlite3* other = nullptr;
        ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(other, "PRAGMA journal_mode=WAL; BEGIN IMMEDIATE;", nullptr, nullptr, nullptr), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(other, schema.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(other);

        const int seen = shim::refused();
        std::string error;
        int64_t id = 0;
        std::thread run([&] {
            try {
                store::RunStore db(path);
                id = db.create_run(experiment("kept"), {});
                db.add_records(id, {record(1), record(2), record(3)});
                db.finish_run(id, "finished", nlohmann::json{{"steps", 3}});
            } catch (const std::exception& e) {
                error = e.what();
            }
        });
        const bool blocked = shim::wait_refused_after(seen);  // the opener waits for the lock
        ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
        run.join();
        sqlite3_close(other);
        EXPECT_TRUE(blocked);
        ASSERT_EQ(error, "");
        store::RunStore db(path, store::RunStore::Access::read_only);
        const auto runs = db.list_runs();
        ASSERT_EQ(runs.size(), 1u) << "round " << round;
        EXPECT_EQ(runs[0].run_id, id);
        EXPECT_EQ(runs[0].status, "finished");
        EXPECT_EQ(db.loss_curve(id).size(), 3u);
    }
}

// A store busy with another writer's transaction makes a run wait for it, not fail.
TEST_F(RunStoreStress, ABusyStoreMakesAWriterWaitNotFail) {
    const std::string path = (dir.path / "runs.db").string();
    { store::RunStore db(path); }
    sqlite3* other = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &other), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE; UPDATE runs SET notes = 'x';", nullptr, nullptr, nullptr), SQLITE_OK);
    const int seen = shim::refused();
    std::string error;
    std::thread run([&] {
        try {
            store::RunStore db(path);
            const int64_t id = db.create_run(experiment("waited"), {});
            db.add_records(id, {record(1)});
        } catch (const std::exception& e) {
            error = e.what();
        }
    });
    const bool blocked = shim::wait_refused_after(seen);
    ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    run.join();
    sqlite3_close(other);
    EXPECT_TRUE(blocked);
    EXPECT_EQ(error, "");
    EXPECT_EQ(count(path, "SELECT count(*) FROM records"), 1);
}

// Two processes that record runs into one new store at the same moment both finish whole,
// with distinct run ids.
TEST_F(RunStoreStress, TwoProcessesRecordingAtOnceBothFinishWhole) {
    constexpr int kSteps = 1500;
    for (int round = 0; round < 4; ++round) {
        const std::string path = (dir.path / ("two" + std::to_string(round) + ".db")).string();
        int go[2];
        ASSERT_EQ(pipe(go), 0);
        pid_t children[2];
        for (int c = 0; c < 2; ++c) {
            children[c] = fork();
            ASSERT_GE(children[c], 0);
            if (children[c] == 0) {
                close(go[1]);
                char byte;
                (void)!read(go[0], &byte, 1);  // returns when the parent closes its end: both start
                int rc = 0;
                try {
                    store::RunStore db(path);
                    store::RunRecorder rec(db, nlohmann::json::object());
                    rec.on_start(experiment("process " + std::to_string(c)), kSteps);
                    for (int64_t s = 1; s <= kSteps; ++s) rec.on_step(record(s));
                    config::RunSummary summary;
                    summary.steps = kSteps;
                    rec.on_finish(summary);
                    if (!rec.write_error().empty()) rc = 3;
                } catch (...) {
                    rc = 4;
                }
                _exit(rc);
            }
        }
        close(go[0]);
        close(go[1]);
        for (pid_t child : children) {
            int status = 0;
            ASSERT_EQ(waitpid(child, &status, 0), child);
            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round << " status " << status;
        }
        store::RunStore db(path, store::RunStore::Access::read_only);
        const auto runs = db.list_runs();
        ASSERT_EQ(runs.size(), 2u) << "round " << round;
        EXPECT_NE(runs[0].run_id, runs[1].run_id);
        for (const auto& r : runs) {
            EXPECT_EQ(r.status, "finished");
            EXPECT_EQ(db.loss_curve(r.run_id).size(), size_t(kSteps));
        }
    }
}

// A run whose store fills up: the recorder reports it once (the caller stops the run), writes
// nothing more but the run's end, recorded `failed` with "disk full: ..."; the rows committed
// before stay, the store is whole, and it can be listed while the disk is still full.
TEST_F(RunStoreStress, AFullDiskFailsTheRunAndKeepsWhatWasCommitted) {
    const std::string path = (dir.path / "runs.db").string();
    store::RunStore db(path);
    std::mutex m;
    std::condition_variable cv;
    int reported = 0;
    int64_t id = 0;
    std::string error;
    {
        store::RunRecorder rec(db, nlohmann::json::object());
        rec.on_store_failed([&] {
            std::lock_guard lock(m);
            ++reported;
            cv.notify_all();
        });
        rec.on_start(experiment("filled"), 10000);
        id = rec.run_id();
        std::vector<config::StepRecord> committed;
        for (int64_t s = 1; s <= 100; ++s) committed.push_back(record(s));
        db.add_records(id, committed);
        config::EvalResult ev;
        ev.step = 100;
        ev.loss = 0.25;
        ev.samples = 10;
        rec.on_eval(ev);

        shim::space = 8192;  // two pages more: a batch of steps does not fit, the run's end does
        for (int64_t s = 101; s <= 700; ++s) rec.on_step(record(s));  // a batch of 512 is written at once
        {
            std::unique_lock lock(m);
            ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return reported > 0; }));
        }
        EXPECT_TRUE(rec.disk_full());
        for (int64_t s = 701; s <= 800; ++s) rec.on_step(record(s));  // dropped: nothing more is tried
        rec.on_eval(ev);
        config::RunSummary summary;  // the run as the engine ends it: stopped by the callback
        summary.status = "stopped";
        summary.steps = 800;
        const auto recorded = rec.as_recorded(summary);
        EXPECT_EQ(recorded.status, "failed");
        EXPECT_EQ(recorded.error.rfind("disk full: ", 0), 0u) << recorded.error;
        rec.on_finish(summary);
        error = rec.write_error();
    }
    EXPECT_EQ(reported, 1);
    EXPECT_EQ(error.rfind("disk full: ", 0), 0u) << error;
    EXPECT_NE(error.find("database or disk is full"), std::string::npos) << error;

    // Listed read-only while the disk is still full: nothing is written to list.
    store::RunStore reader(path, store::RunStore::Access::read_only);
    const auto run = reader.get_run(id);
    ASSERT_TRUE(run);
    EXPECT_EQ(run->status, "failed");
    EXPECT_EQ(run->summary["error"].get<std::string>().rfind("disk full: ", 0), 0u);
    EXPECT_EQ(reader.loss_curve(id).size(), 100u);  // every committed row, no more
    std::ostringstream csv;
    EXPECT_TRUE(reader.export_csv(id, csv));
    shim::space = INT64_MAX;
    EXPECT_EQ(count(path, "SELECT count(*) FROM evaluations"), 1);
    EXPECT_EQ(query(path, "PRAGMA integrity_check"), "ok");
}

// A run that cannot even get its row fails the same way, unrecorded (run id 0).
TEST_F(RunStoreStress, AFullDiskBeforeTheRunsRowFailsTheRun) {
    const std::string path = (dir.path / "runs.db").string();
    store::RunStore db(path);
    db.create_run(experiment("before"), {});
    shim::space = 0;
    int reported = 0;
    store::RunRecorder rec(db, nlohmann::json::object());
    rec.on_store_failed([&] { ++reported; });
    rec.on_start(experiment("no room"), 10);  // on this thread: the callback has run on return
    EXPECT_EQ(reported, 1);
    EXPECT_EQ(rec.run_id(), 0);
    EXPECT_TRUE(rec.disk_full());
    config::RunSummary summary;
    summary.status = "stopped";
    EXPECT_EQ(rec.as_recorded(summary).status, "failed");
    rec.on_finish(summary);
    shim::space = INT64_MAX;
    EXPECT_EQ(db.list_runs().size(), 1u);
}

// A store that cannot even be created for lack of space says so.
TEST_F(RunStoreStress, AFullDiskAtCreationIsAClearError) {
    const std::string path = (dir.path / "runs.db").string();
    shim::space = 0;
    try {
        store::RunStore db(path);
        FAIL() << "opened";
    } catch (const store::StoreError& e) {
        EXPECT_TRUE(e.disk_full()) << e.what();
        EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos) << e.what();
    }
}

// An evaluation whose loss is NaN is stored, its loss NULL, not refused by a constraint.
TEST_F(RunStoreStress, ANaNEvaluationIsStoredWithoutItsLoss) {
    const std::string path = (dir.path / "runs.db").string();
    store::RunStore db(path);
    std::string error;
    {
        store::RunRecorder rec(db, nlohmann::json::object());
        rec.on_start(experiment("nan"), 10);
        config::EvalResult ev;
        ev.step = 10;
        ev.loss = std::nan("");
        ev.accuracy = 0.1;
        ev.samples = 10;
        rec.on_eval(ev);
        config::RunSummary summary;
        summary.status = "failed";
        summary.error = "the test loss became NaN";
        rec.on_finish(summary);
        error = rec.write_error();
    }
    EXPECT_EQ(error, "");
    EXPECT_EQ(query(path, "SELECT quote(loss) FROM evaluations"), "NULL");
    EXPECT_EQ(query(path, "SELECT step FROM evaluations"), "10");
}

// A store of schema 1 with an evaluation is migrated: the evaluation kept, the application id set.
TEST_F(RunStoreStress, MigrationKeepsEvaluationsAndSetsTheApplicationId) {
    const std::string path = (dir.path / "old.db").string();
    store_testing::write_version1_store(path,
                                        "INSERT INTO evaluations (run_id, step, loss, accuracy, samples) "
                                        "VALUES (1, 5, 0.75, 0.5, 20);");
    { store::RunStore db(path); }
    EXPECT_EQ(query(path, "SELECT loss || ',' || accuracy || ',' || samples FROM evaluations"), "0.75,0.5,20");
    EXPECT_EQ(query(path, "PRAGMA application_id"), std::to_string(store::kApplicationId));
    EXPECT_EQ(query(path, "PRAGMA user_version"), std::to_string(store::kSchemaVersion));
    EXPECT_EQ(query(path, "PRAGMA integrity_check"), "ok");
}

// A database that another application marked as its own (PRAGMA application_id) is refused and
// left as it was, even without a table; an empty new file becomes a store.
TEST_F(RunStoreStress, AnotherApplicationsIdIsRefusedAnEmptyFileIsInitialised) {
    const std::string path = (dir.path / "theirs.db").string();
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(raw, "PRAGMA application_id = 305419896", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(raw);
    const auto before = read_bytes(path);
    for (auto access : {store::RunStore::Access::write, store::RunStore::Access::read_only}) {
        try {
            store::RunStore db(path, access);
            FAIL() << "opened";
        } catch (const store::StoreError& e) {
            EXPECT_NE(std::string(e.what()).find("not a ParaLab run store (its application id 0x12345678"),
                      std::string::npos)
                << e.what();
        }
    }
    EXPECT_EQ(read_bytes(path), before);
    EXPECT_FALSE(fs::exists(path + "-wal"));

    const std::string empty = (dir.path / "empty.db").string();
    { std::ofstream touch(empty); }
    store::RunStore db(empty);
    EXPECT_GT(db.create_run(experiment("first"), {}), 0);
}

// A file system mounted for the test (root only; skipped elsewhere): unmounted on the way out.
struct Mount {
    fs::path at;
    bool mounted = false;
    ~Mount() {
        if (mounted) umount2(at.c_str(), MNT_DETACH);
    }
};

// A store on a read-only file system is read as it is, and refused for recording a run with a
// clear message before anything is tried; a store file that is itself read-only likewise.
TEST_F(RunStoreStress, AReadOnlyStoreIsReadAndRefusedForWriting) {
    Mount ro{dir.path / "ro"};
    fs::create_directories(ro.at);
    if (mount("tmpfs", ro.at.c_str(), "tmpfs", 0, "size=4m") != 0)
        GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
    ro.mounted = true;
    const std::string path = (ro.at / "runs.db").string();
    {
        store::RunStore db(path);
        const int64_t id = db.create_run(experiment("kept"), {});
        db.add_records(id, {record(1), record(2)});
        db.finish_run(id, "finished", nlohmann::json{{"steps", 2}});
    }
    ASSERT_FALSE(fs::exists(path + "-wal"));  // a clean close leaves the file alone
    // A copy taken while the store was open: its write-ahead log holds rows the file lacks.
    const std::string with_log = (ro.at / "with_log.db").string();
    {
        store::RunStore db(path);
        db.create_run(experiment("in the log"), {});
        fs::copy_file(path, with_log);
        fs::copy_file(path + "-wal", with_log + "-wal");
    }
    ASSERT_EQ(mount(nullptr, ro.at.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0) << std::strerror(errno);
    try {  // not read without its log (what it showed would lack the logged rows): refused, saying why
        store::RunStore db(with_log, store::RunStore::Access::read_only);
        FAIL() << "opened";
    } catch (const store::StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("needs a shared-memory file"), std::string::npos) << e.what();
    }
    {
        store::RunStore db(path, store::RunStore::Access::read_only);
        const auto runs = db.list_runs();
        ASSERT_EQ(runs.size(), 2u);
        EXPECT_EQ(runs[0].status, "finished");
        EXPECT_EQ(db.loss_curve(runs[0].run_id).size(), 2u);
    }
    for (const std::string& target : {path, (ro.at / "new.db").string()}) {
        try {
            store::RunStore db(target);
            FAIL() << "opened " << target;
        } catch (const store::StoreError& e) {
            EXPECT_NE(std::string(e.what()).find("cannot record a run here"), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("Read-only file system"), std::string::npos) << e.what();
        }
    }
    EXPECT_THROW(store::RunStore((ro.at / "missing.db").string(), store::RunStore::Access::read_only),
                 store::StoreError);

    // The file alone read-only (a read-only bind mount of it), its folder writable.
    const std::string file = (dir.path / "file.db").string();
    {
        store::RunStore db(file);
        db.create_run(experiment("kept"), {});
    }
    Mount bind{file};
    ASSERT_EQ(mount(file.c_str(), file.c_str(), nullptr, MS_BIND, nullptr), 0) << std::strerror(errno);
    bind.mounted = true;
    ASSERT_EQ(mount(nullptr, file.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr), 0)
        << std::strerror(errno);
    const auto before = read_bytes(file);
    try {
        store::RunStore db(file);
        FAIL() << "opened";
    } catch (const store::StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("the run store is read-only"), std::string::npos) << e.what();
    }
    store::RunStore reader(file, store::RunStore::Access::read_only);
    EXPECT_EQ(reader.list_runs().size(), 1u);
    EXPECT_EQ(read_bytes(file), before);
}

// Processes killed (SIGKILL) at random moments while they record runs leave a whole store:
// the integrity check is clean, each run is either finished or interrupted, and each keeps
// whole batches of the steps it committed.
TEST_F(RunStoreStress, KillsWhileWritingLeaveAWholeStore) {
    const std::string path = (dir.path / "runs.db").string();
    { store::RunStore db(path); }
    std::mt19937 random(12345);
    constexpr int kBatch = 50;
    for (int kill_no = 0; kill_no < 20; ++kill_no) {
        int progress[2];
        ASSERT_EQ(pipe(progress), 0);
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {  // records runs until it is killed, a byte down the pipe per batch
            close(progress[0]);
            try {
                store::RunStore db(path);
                for (int64_t run = 0;; ++run) {
                    const int64_t id = db.create_run(experiment("victim"), {});
                    for (int64_t batch = 0; batch < 4; ++batch) {
                        std::vector<config::StepRecord> rows;
                        for (int64_t s = 1; s <= kBatch; ++s) rows.push_back(record(batch * kBatch + s));
                        db.add_records(id, rows);
                        char byte = 'b';
                        (void)!write(progress[1], &byte, 1);
                    }
                    config::EvalResult ev;
                    ev.step = 4 * kBatch;
                    ev.loss = 0.5;
                    ev.samples = 1;
                    db.add_eval(id, ev);
                    db.finish_run(id, "finished", nlohmann::json{{"steps", 4 * kBatch}});
                }
            } catch (...) {
                _exit(3);
            }
        }
        close(progress[1]);
        const int batches = std::uniform_int_distribution<int>(1, 6)(random);
        char byte = 0;
        for (int b = 0; b < batches; ++b) ASSERT_EQ(read(progress[0], &byte, 1), 1) << "kill " << kill_no;
        kill(child, SIGKILL);  // while it goes on writing, wherever it is
        int status = 0;
        ASSERT_EQ(waitpid(child, &status, 0), child);
        close(progress[0]);
        ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer failed: " << status;
    }
    EXPECT_EQ(query(path, "PRAGMA integrity_check"), "ok");
    store::RunStore db(path);  // marks the killed processes' runs interrupted
    const auto runs = db.list_runs();
    EXPECT_GE(runs.size(), 20u);
    for (const auto& r : runs) {
        EXPECT_TRUE(r.status == "finished" || r.status == "interrupted") << r.status;
        const size_t steps = db.loss_curve(r.run_id).size();
        EXPECT_EQ(steps % kBatch, 0u) << "run " << r.run_id << " has a part of a batch";
        if (r.status == "finished") {
            EXPECT_EQ(steps, size_t(4 * kBatch));
        }
    }
    EXPECT_EQ(query(path, "PRAGMA integrity_check"), "ok");
}

}  // namespace

// Resuming onto a full disk: the claim fails as a full disk (the CLI says so, and the run keeps
// its status); a recorder whose reopening finds no room fails the run unrecorded (run id 0),
// never reporting a resumed run 0.
TEST_F(RunStoreStress, AResumeOntoAFullDiskFailsClearly) {
    const std::string path = (dir.path / "runs.db").string();
    store::RunStore db(path);
    const int64_t id = db.create_run(experiment("stopped"), {});
    db.finish_run(id, "stopped", nlohmann::json::object());
    shim::space = 0;
    try {
        db.claim_for_resume(id);
        FAIL() << "claimed on a full disk";
    } catch (const store::StoreError& e) {
        EXPECT_TRUE(e.disk_full()) << e.what();
    }
    store::RunRecorder rec(db, nlohmann::json::object());
    int reported = 0;
    rec.on_store_failed([&] { ++reported; });
    rec.resume(id, [] { return int64_t{0}; });
    rec.on_start(experiment("stopped"), 10);
    EXPECT_EQ(reported, 1);
    EXPECT_EQ(rec.run_id(), 0);
    config::RunSummary summary;
    summary.status = "finished";
    EXPECT_EQ(rec.as_recorded(summary).status, "failed");
    EXPECT_NE(rec.as_recorded(summary).error.find("disk full"), std::string::npos);
    rec.on_finish(summary);
    shim::space = INT64_MAX;
    EXPECT_EQ(db.get_run(id)->status, "stopped");
}
