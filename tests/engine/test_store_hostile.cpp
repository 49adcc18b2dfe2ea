// The run store against rows and files it did not write: a bad row is skipped and reported by id
// (never hiding the others), configs nested without end are refused, the hand-in import checks
// the file first and copies values, all or nothing; a store file replaced or deleted under a
// writer is found at the next commit; a run is resumed by one process at a time.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "engine/store/run_store.h"
#include "store_testing.h"

using namespace paralab;
namespace fs = std::filesystem;

namespace {

using store_testing::experiment;
using store_testing::TempDir;

// Runs `sql` on the file at `path` with a plain connection (what another program could do).
void sqlite(const std::string& path, const std::string& sql) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    char* err = nullptr;
    const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &err);
    EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << " in " << sql.substr(0, 200);
    sqlite3_free(err);
    sqlite3_close(raw);
}

// A store of `n` finished runs, "run1" ... "runN", each with two records and an evaluation.
void write_store(const std::string& path, int n) {
    store::RunStore db(path);
    for (int i = 1; i <= n; ++i) {
        const int64_t id = db.create_run(experiment("run" + std::to_string(i)), nlohmann::json{{"paralab", 1}});
        std::vector<config::StepRecord> records(2);
        for (int s = 0; s < 2; ++s) {
            records[s].step = s + 1;
            records[s].device = "cpu:0";
            records[s].loss = 0.5;
            records[s].samples = 8;
        }
        db.add_records(id, records);
        config::EvalResult ev;
        ev.step = 2;
        ev.loss = 0.25;
        ev.samples = 4;
        db.add_eval(id, ev);
        db.finish_run(id, "finished", nlohmann::json{{"steps", 2}});
    }
}

std::vector<std::string> names(const std::vector<store::RunRow>& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(r.name);
    return out;
}

std::string message_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no error)";
}

#define EXPECT_CONTAINS(text, part) \
    EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

}  // namespace

// One row whose devices are valid JSON but not a list of strings, one whose config nests
// 300,000 arrays: each is reported by its id and left out; the other runs read as before, and
// `get_run` of a bad one names the run and the cause.
TEST(RunStoreHostile, ABadRowIsSkippedAndReportedByIdNeverHidingTheOthers) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    write_store(path, 4);
    sqlite(path, R"(UPDATE runs SET devices = '{"cpu:0": 1}' WHERE run_id = 2)");
    sqlite(path, "UPDATE runs SET config = '" + std::string(300000, '[') + "' WHERE run_id = 3");
    sqlite(path, "UPDATE runs SET name = x'1b5d303b6f776e6564' WHERE run_id = 4");  // a blob
    for (const auto access : {store::RunStore::Access::read_only, store::RunStore::Access::write}) {
        store::RunStore db(path, access);
        std::vector<store::SkippedRun> skipped;
        const auto rows = db.list_runs(&skipped);
        EXPECT_EQ(names(rows), std::vector<std::string>{"run1"});
        ASSERT_EQ(skipped.size(), 3u);
        EXPECT_EQ(skipped[0].run_id, 2);
        EXPECT_CONTAINS(skipped[0].reason, "devices: expected a list of device names, got an object");
        EXPECT_EQ(skipped[1].run_id, 3);
        EXPECT_CONTAINS(skipped[1].reason, "config: nested deeper than 512 levels");
        EXPECT_EQ(skipped[2].run_id, 4);
        EXPECT_CONTAINS(skipped[2].reason, "name: expected text, got a blob");
        EXPECT_EQ(db.list_runs().size(), 1u);
        ASSERT_TRUE(db.get_run(1));
        EXPECT_EQ(db.get_run(1)->devices, std::vector<std::string>{"cpu:0"});
        EXPECT_CONTAINS(message_of([&] { db.get_run(2); }), "run 2 cannot be read: devices");
        EXPECT_CONTAINS(message_of([&] { db.get_run(3); }), "run 3 cannot be read: config: nested deeper");
        EXPECT_FALSE(db.get_run(99));
    }
}

// A config or summary that is not an object, and a status no ParaLab writes, are bad rows too.
TEST(RunStoreHostile, ValuesOfTheWrongShapeAreBadRows) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    write_store(path, 3);
    sqlite(path, "UPDATE runs SET summary = '[1, 2]' WHERE run_id = 1");
    sqlite(path, "UPDATE runs SET status = 'owned' WHERE run_id = 2");
    sqlite(path, R"(UPDATE runs SET config = '{"a": 1, "a": 2}' WHERE run_id = 3)");
    store::RunStore db(path, store::RunStore::Access::read_only);
    std::vector<store::SkippedRun> skipped;
    EXPECT_TRUE(db.list_runs(&skipped).empty());
    ASSERT_EQ(skipped.size(), 3u);
    EXPECT_CONTAINS(skipped[0].reason, "summary: expected a JSON object, got an array");
    EXPECT_CONTAINS(skipped[1].reason, "status: expected running, finished, stopped, interrupted or failed");
    EXPECT_CONTAINS(skipped[2].reason, "config: a: duplicate key");
}

// The import refuses what a run store never holds, before reading a row: views (an endless
// recursive one named runs included, which must not be evaluated), triggers and generated
// columns. The destination is left as it was.
TEST(RunStoreHostile, TheImportRefusesViewsTriggersAndGeneratedColumns) {
    TempDir dir;
    const std::string teacher = (dir.path / "class.db").string();
    write_store(teacher, 2);
    const auto teacher_runs = [&] { return store::RunStore(teacher, store::RunStore::Access::read_only).list_runs().size(); };

    struct Case {
        std::string name, sql, expected;
    };
    const std::vector<Case> cases = {
        {"view", "CREATE VIEW every_run AS SELECT * FROM runs", "it holds a view, every_run"},
        {"trigger",
         "CREATE TRIGGER grow AFTER INSERT ON records BEGIN INSERT INTO records SELECT * FROM records; END",
         "it holds a trigger, grow"},
        {"endless runs view",
         "ALTER TABLE runs RENAME TO old_runs; CREATE VIEW runs AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
         "SELECT x + 1 FROM c) SELECT x AS run_id, 'n' AS name, 'finished' AS status, 'single' AS strategy, "
         "'[]' AS devices, '{}' AS config, '' AS created_at, NULL AS finished_at, NULL AS summary, '' AS notes, "
         "NULL AS pid, NULL AS host, '' AS author FROM c",
         "it holds a view, runs"},
        {"generated column", "ALTER TABLE runs ADD COLUMN bloat TEXT GENERATED ALWAYS AS (printf('%.*c', 1000000, 'x'))",
         "its column runs.bloat is generated"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const std::string source = (dir.path / (c.name + ".db")).string();
        write_store(source, 1);
        sqlite(source, c.sql);
        store::RunStore db(teacher);
        const std::string error = message_of([&] { db.import_runs(source); });
        EXPECT_CONTAINS(error, "not a ParaLab run store (" + c.expected);
        EXPECT_EQ(teacher_runs(), 2u);
        // Listing it is refused the same way, where it concerns the store's tables.
        if (c.name != "view")
            EXPECT_CONTAINS(message_of([&] { store::RunStore(source, store::RunStore::Access::read_only).list_runs(); }),
                            c.expected);
    }
}

// A row that does not read refuses the whole import, naming the run; so does a record column
// of the wrong type and a value longer than a store's longest. Nothing is imported.
TEST(RunStoreHostile, TheImportChecksEveryValueAndIsAllOrNothing) {
    TempDir dir;
    const std::string teacher = (dir.path / "class.db").string();
    write_store(teacher, 1);
    struct Case {
        std::string name, sql, expected;
    };
    const std::vector<Case> cases = {
        {"devices not a list", R"(UPDATE runs SET devices = '"cpu:0"' WHERE run_id = 2)",
         "run 2 cannot be imported: devices: expected a list of device names"},
        {"deep config", "UPDATE runs SET config = '" + std::string(300000, '[') + "' WHERE run_id = 2",
         "run 2 cannot be imported: config: nested deeper than 512 levels"},
        {"record of text", "UPDATE records SET samples = 'many' WHERE run_id = 2",
         "run 2 cannot be imported: records.samples: expected an integer, got text"},
        {"huge note", "UPDATE runs SET notes = printf('%.*c', 40000000, 'x') WHERE run_id = 3",
         "string or blob too big"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.name);
        const std::string source = (dir.path / (c.name + ".db")).string();
        write_store(source, 3);
        sqlite(source, c.sql);
        store::RunStore db(teacher);
        const std::string error = message_of([&] { db.import_runs(source); });
        EXPECT_CONTAINS(error, c.expected);
        EXPECT_CONTAINS(error, "nothing was imported");
        EXPECT_EQ(db.list_runs().size(), 1u);
        std::ostringstream csv;
        EXPECT_EQ(db.loss_curve(2).size(), 0u);  // no record of a refused import stays behind
    }
    // A good file still imports, every value written anew.
    const std::string good = (dir.path / "good.db").string();
    write_store(good, 2);
    store::RunStore db(teacher);
    EXPECT_EQ(db.import_runs(good).size(), 2u);
    EXPECT_EQ(db.list_runs().size(), 3u);
    EXPECT_EQ(db.loss_curve(3).size(), 2u);
}

// A damaged file is refused by SQLite's quick_check before any row is copied.
TEST(RunStoreHostile, TheImportRunsQuickCheckFirst) {
    TempDir dir;
    const std::string source = (dir.path / "damaged.db").string();
    {
        store::RunStore db(source);
        const int64_t id = db.create_run(experiment("big"), nlohmann::json{{"paralab", 1}});
        std::vector<config::StepRecord> records(3000);
        for (size_t s = 0; s < records.size(); ++s) {
            records[s].step = static_cast<int64_t>(s) + 1;
            records[s].device = "cpu:0";
        }
        db.add_records(id, records);
    }
    sqlite(source, "PRAGMA journal_mode = DELETE");
    // Page 5 (somewhere in the records' tree) overwritten.
    {
        std::fstream f(source, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(4096 * 4 + 8);
        const std::string junk(512, '\x5a');
        f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
    }
    const std::string teacher = (dir.path / "class.db").string();
    write_store(teacher, 1);
    store::RunStore db(teacher);
    EXPECT_CONTAINS(message_of([&] { db.import_runs(source); }), "the file is damaged (SQLite's quick_check");
    EXPECT_EQ(db.list_runs().size(), 1u);
}

// A store file replaced (another file renamed over it) or deleted while a process writes it:
// the next commit fails, saying so, and the file now there is left as it was.
TEST(RunStoreHostile, AStoreReplacedOrDeletedUnderAWriterIsFoundAtTheNextCommit) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    const std::string other = (dir.path / "backup.db").string();
    write_store(other, 3);
    const auto size_before = fs::file_size(other);
    {
        store::RunStore db(path);
        const int64_t id = db.create_run(experiment("a"), nlohmann::json{{"paralab", 1}});
        fs::rename(other, path);
        std::vector<config::StepRecord> records(1);
        records[0].step = 1;
        records[0].device = "cpu:0";
        try {
            db.add_records(id, records);
            FAIL() << "written into a replaced store";
        } catch (const store::StoreError& e) {
            EXPECT_TRUE(e.replaced());
            EXPECT_CONTAINS(std::string(e.what()), "was replaced by another file");
        }
        EXPECT_THROW(db.finish_run(id, "finished", nlohmann::json::object()), store::StoreError);
        EXPECT_THROW(db.create_run(experiment("c"), nlohmann::json{{"paralab", 1}}), store::StoreError);
    }
    // The writer gone (its write-ahead log, which belonged to the file it opened, with it), the
    // file now there is the backup as it was.
    EXPECT_EQ(fs::file_size(path), size_before);
    EXPECT_EQ(names(store::RunStore(path, store::RunStore::Access::read_only).list_runs()),
              (std::vector<std::string>{"run1", "run2", "run3"}));

    // Deleted: a recorder fails the run with the message, once.
    const std::string gone = (dir.path / "gone.db").string();
    store::RunStore doomed(gone);
    store::RunRecorder rec(doomed, nlohmann::json{{"paralab", 1}});
    int failures = 0;
    rec.on_store_failed([&] { ++failures; });
    rec.on_start(experiment("b"), 3);
    fs::remove(gone);
    config::EvalResult ev;
    ev.step = 1;
    rec.on_eval(ev);
    rec.on_eval(ev);
    EXPECT_EQ(failures, 1);
    EXPECT_TRUE(rec.store_failed());
    config::RunSummary s;
    s.status = "finished";
    const auto recorded = rec.as_recorded(s);
    EXPECT_EQ(recorded.status, "failed");
    EXPECT_CONTAINS(recorded.error, "was deleted while this process was writing it");
    rec.on_finish(s);
}

// Of several resumes of one run started at once, exactly one takes it; the others are refused
// with "run N is running". A run given back gets its status again; a finished run is refused.
TEST(RunStoreHostile, AResumeIsExclusive) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    write_store(path, 2);
    sqlite(path, "UPDATE runs SET status = 'stopped' WHERE run_id = 1");
    constexpr int kResumes = 6;
    std::atomic<int> taken{0}, refused{0};
    std::vector<std::thread> resumes;
    std::atomic<int> ready{0};
    for (int i = 0; i < kResumes; ++i)
        resumes.emplace_back([&] {
            store::RunStore db(path);  // a connection each, as processes have
            ++ready;
            while (ready < kResumes) std::this_thread::yield();
            try {
                EXPECT_EQ(db.claim_for_resume(1), "stopped");
                ++taken;
            } catch (const store::StoreError& e) {
                EXPECT_CONTAINS(std::string(e.what()), "run 1 is running");
                ++refused;
            }
        });
    for (auto& t : resumes) t.join();
    EXPECT_EQ(taken, 1);
    EXPECT_EQ(refused, kResumes - 1);
    store::RunStore db(path);
    EXPECT_EQ(db.get_run(1)->status, "running");
    // The recorder of a second resume in this process is refused too.
    store::RunRecorder second(db, nlohmann::json{{"paralab", 1}});
    second.resume(1, [] { return int64_t{1}; });
    EXPECT_CONTAINS(message_of([&] { second.on_start(experiment("run1"), 2); }), "run 1 is running");
    db.release_claim(1, "stopped");
    EXPECT_EQ(db.get_run(1)->status, "stopped");
    EXPECT_CONTAINS(message_of([&] { db.claim_for_resume(2); }), "run 2 already finished");
    EXPECT_CONTAINS(message_of([&] { db.claim_for_resume(9); }), "run 9 is not in the store");
    // Claimed and reopened: later rows go, the run is this process's.
    EXPECT_EQ(db.claim_for_resume(1), "stopped");
    EXPECT_TRUE(db.reopen_run(1, 1));
    EXPECT_EQ(db.loss_curve(1).size(), 1u);
}
