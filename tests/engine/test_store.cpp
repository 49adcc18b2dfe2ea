// The run store: schema and migrations, batched writes from the recorder while a reader
// reads, refusal of newer or damaged files without touching them, and runs left `running` by
// a dead process marked `interrupted` with their rows kept.
#include <gtest/gtest.h>

#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/store/run_store.h"
#include "store_testing.h"

using namespace paralab;
namespace fs = std::filesystem;

namespace {

using store_testing::experiment;
using store_testing::TempDir;

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

config::StepRecord record(int64_t step, double loss) {
    config::StepRecord r;
    r.step = step;
    r.device = "cpu:0";
    r.loss = loss;
    r.samples = 32;
    r.compute_ms = 2;
    r.wall_s = 0.002 * static_cast<double>(step);
    return r;
}

// The recorder writes a step only once every device's record of it is in: a process killed
// between two writes leaves each step whole or absent (a resumed run then finds whole steps).
TEST(RunStore, RecorderWritesWholeStepsOnly) {
    TempDir dir;
    store::RunStore db((dir.path / "runs.db").string());
    store::RunRecorder rec(db, nlohmann::json{{"paralab", 1}});
    config::Experiment e = experiment("whole");
    e.devices = {"cpu:0", "cpu:1"};
    rec.on_start(e, 10);
    const auto on = [&](const char* device, int64_t step) {
        config::StepRecord r = record(step, 1.0);
        r.device = device;
        rec.on_step(r);
    };
    const auto steps_of = [&](const std::string& device) {
        for (const auto& d : db.device_stats(rec.run_id()))
            if (d.device == device) return d.steps;
        return int64_t{0};
    };
    on("cpu:0", 1);
    on("cpu:0", 2);
    rec.flush();  // cpu:1 has not reported step 1: nothing is whole
    EXPECT_EQ(steps_of("cpu:0"), 0);
    on("cpu:1", 1);
    rec.flush();  // step 1 is whole, step 2 is not
    EXPECT_EQ(steps_of("cpu:0"), 1);
    EXPECT_EQ(steps_of("cpu:1"), 1);
    on("cpu:1", 2);
    rec.flush();
    EXPECT_EQ(steps_of("cpu:0"), 2);
    EXPECT_EQ(steps_of("cpu:1"), 2);
    on("cpu:0", 3);  // the run's end writes whatever is queued
    config::RunSummary summary;
    summary.status = "stopped";
    summary.steps = 3;
    rec.on_finish(summary);
    EXPECT_EQ(steps_of("cpu:0"), 3);
}

TEST(RunStore, RecordsARunAndExportsCsv) {
    TempDir dir;
    store::RunStore db((dir.path / "sub" / "runs.db").string());  // creates the folder
    int64_t id = 0;
    {
        store::RunRecorder rec(db, nlohmann::json{{"paralab", 1}});
        rec.on_start(experiment("a"), 100);
        id = rec.run_id();
        for (int64_t s = 1; s <= 100; ++s) {
            for (const char* phase : {"forward", "backward"}) {
                config::Span sp;
                sp.step = s;
                sp.device = "cpu:0";
                sp.phase = phase;
                sp.t_begin = static_cast<double>(s) + (phase[0] == 'b' ? 0.5 : 0.0);
                sp.t_end = sp.t_begin + 0.5;
                rec.on_span(sp);
            }
            rec.on_step(record(s, 1.0 / static_cast<double>(s)));
        }
        config::EvalResult ev;
        ev.step = 100;
        ev.loss = 0.5;
        ev.accuracy = 0.9;
        ev.samples = 10;
        rec.on_eval(ev);
        config::RunSummary summary;
        summary.status = "finished";
        summary.name = "a";
        summary.steps = 100;
        rec.on_finish(summary);
    }
    const auto row = db.get_run(id);
    ASSERT_TRUE(row);
    EXPECT_EQ(row->status, "finished");
    EXPECT_EQ(row->summary["steps"], 100);
    EXPECT_EQ(row->summary["run_id"], id);
    EXPECT_EQ(row->config["paralab"], 1);
    EXPECT_FALSE(row->created_at.empty());
    std::ostringstream csv;
    ASSERT_TRUE(db.export_csv(id, csv));
    std::istringstream lines(csv.str());
    std::string header, first;
    std::getline(lines, header);
    std::getline(lines, first);
    EXPECT_EQ(header.rfind("step,device,epoch,wall_s,loss,samples,samples_per_s,compute_ms,comm_ms,"
                           "idle_ms,data_wait_ms,memory_bytes", 0), 0u);
    EXPECT_EQ(first.rfind("1,cpu:0,0,", 0), 0u) << first;
    const std::string text = csv.str();
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 101);
    EXPECT_FALSE(db.export_csv(id + 1, csv));
    const auto timeline = db.spans(id, 10, 12);
    ASSERT_EQ(timeline.size(), 6u);
    EXPECT_EQ(timeline[0].phase, "forward");
    EXPECT_EQ(timeline[1].phase, "backward");
    EXPECT_DOUBLE_EQ(timeline[5].t_end, 13.0);
}

TEST(RunStore, MigratesAVersion1StoreForward) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    store_testing::write_version1_store(path);
    store::RunStore db(path);
    ASSERT_EQ(db.list_runs().size(), 1u);
    EXPECT_EQ(db.list_runs()[0].name, "old");
    EXPECT_TRUE(db.spans(1, 0, 100).empty());  // the spans table now exists
    std::ostringstream csv;
    EXPECT_TRUE(db.export_csv(1, csv));
}

TEST(RunStore, ListsRunsOldestFirstAcrossReopen) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    {
        store::RunStore db(path);
        db.create_run(experiment("first"), {});
        db.create_run(experiment("second"), {});
    }
    store::RunStore db(path);
    const auto rows = db.list_runs();
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].name, "first");
    EXPECT_EQ(rows[1].name, "second");
    EXPECT_LT(rows[0].run_id, rows[1].run_id);
}

TEST(RunStore, ANewerSchemaIsRefusedAndLeftAlone) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    { store::RunStore db(path); }
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
    sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
    const auto before = read_file(path);
    for (auto access : {store::RunStore::Access::write, store::RunStore::Access::read_only}) {
        try {
            store::RunStore db(path, access);
            FAIL();
        } catch (const store::StoreError& e) {
            EXPECT_NE(std::string(e.what()).find("newer ParaLab"), std::string::npos) << e.what();
        }
    }
    EXPECT_EQ(read_file(path), before);  // not even switched to WAL
}

// Another application's database is refused before anything is written: its bytes, its
// journal mode and its own `runs` table stay as they were.
TEST(RunStore, AForeignDatabaseIsRefusedUntouched) {
    TempDir dir;
    for (const char* schema : {"CREATE TABLE notes (id INTEGER, text TEXT);",
                               "CREATE TABLE runs (id INTEGER, what TEXT); PRAGMA user_version = 1;"}) {
        SCOPED_TRACE(schema);
        const std::string path = (dir.path / "foreign.db").string();
        std::remove(path.c_str());
        sqlite3* raw = nullptr;
        ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(raw, schema, nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(raw);
        const auto before = read_file(path);
        for (auto access : {store::RunStore::Access::write, store::RunStore::Access::read_only}) {
            try {
                store::RunStore db(path, access);
                FAIL() << "opened";
            } catch (const store::StoreError& e) {
                EXPECT_NE(std::string(e.what()).find("not a ParaLab run store"), std::string::npos) << e.what();
            }
        }
        EXPECT_EQ(read_file(path), before);
        EXPECT_FALSE(fs::exists(path + "-wal"));
    }
}

// Listing opens read-only: it never creates a store or its folder, and reads a store as it is.
TEST(RunStore, ReadOnlyAccessCreatesNothing) {
    TempDir dir;
    const fs::path missing = dir.path / "typo" / "sub" / "x.db";
    EXPECT_THROW(store::RunStore(missing.string(), store::RunStore::Access::read_only), store::StoreError);
    EXPECT_FALSE(fs::exists(dir.path / "typo"));
    const std::string path = (dir.path / "runs.db").string();
    {
        store::RunStore db(path);
        db.create_run(experiment("kept"), {});
    }
    store::RunStore db(path, store::RunStore::Access::read_only);
    ASSERT_EQ(db.list_runs().size(), 1u);
    EXPECT_EQ(db.list_runs()[0].name, "kept");
}

// An empty file (a store another opener is creating this moment) read-only is refused as not
// created yet, a StoreError of its own kind that a reader may take as no runs, and left empty.
TEST(RunStore, AnEmptyFileReadOnlyIsAStoreNotCreatedYet) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    { std::ofstream touch(path); }
    EXPECT_THROW(store::RunStore(path, store::RunStore::Access::read_only), store::StoreNotCreated);
    EXPECT_EQ(fs::file_size(path), 0u);
}

TEST(RunStore, ADamagedFileIsRefusedAndLeftAlone) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    { std::ofstream(path) << "this is not a database, it is somebody's notes\n"; }
    try {
        store::RunStore db(path);
        FAIL();
    } catch (const store::StoreError& e) {
        EXPECT_NE(std::string(e.what()).find("not a ParaLab run store"), std::string::npos) << e.what();
    }
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    EXPECT_EQ(line, "this is not a database, it is somebody's notes");
}

TEST(RunStore, AKilledRunIsMarkedInterruptedAndKeepsItsRows) {
    TempDir dir;
    const std::string path = (dir.path / "runs.db").string();
    { store::RunStore db(path); }
    int pipefd[2];
    ASSERT_EQ(pipe(pipefd), 0);
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {  // a training process that gets killed mid-run
        store::RunStore db(path);
        const int64_t id = db.create_run(experiment("killed"), {});
        std::vector<config::StepRecord> rows;
        for (int64_t s = 1; s <= 10; ++s) rows.push_back(record(s, 0.5));
        db.add_records(id, rows);
        char ok = 'y';
        (void)!write(pipefd[1], &ok, 1);
        for (;;) pause();
    }
    char ok = 0;
    ASSERT_EQ(read(pipefd[0], &ok, 1), 1);
    {
        store::RunStore reader(path);  // while the child lives, its run is still running
        EXPECT_EQ(reader.list_runs().at(0).status, "running");
    }
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    store::RunStore db(path);
    const auto rows = db.list_runs();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].status, "interrupted");
    const auto run = db.get_run(rows[0].run_id);
    EXPECT_EQ(run->summary["steps"], 10);
    std::ostringstream csv;
    db.export_csv(rows[0].run_id, csv);
    const std::string text = csv.str();
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 11);
}

TEST(RunStore, UnwritableLocationIsAClearError) {
    EXPECT_THROW(store::RunStore("/proc/paralab/runs.db"), store::StoreError);
}

}  // namespace

// Two openers of a store that does not exist yet (the window's runs view and a run starting at
// the same moment) both get it: the switch to WAL waits for the other instead of failing.
TEST(RunStore, ConcurrentFirstOpensOfANewStoreBothSucceed) {
    for (int round = 0; round < 30; ++round) {
        const std::string path = ::testing::TempDir() + "/race-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(round) + ".db";
        std::remove(path.c_str());
        std::atomic<int> opened{0};
        std::string errors;
        std::mutex m;
        auto open_it = [&] {
            try {
                store::RunStore db(path);
                ++opened;
            } catch (const std::exception& e) {
                std::lock_guard lock(m);
                errors += e.what();
            }
        };
        std::thread a(open_it), b(open_it), c(open_it);
        a.join(), b.join(), c.join();
        EXPECT_EQ(opened.load(), 3) << errors;
        std::remove(path.c_str());
        std::remove((path + "-wal").c_str());
        std::remove((path + "-shm").c_str());
    }
}

// Runs recorded at once into a store that does not exist yet are all kept: an opener that finds
// the schema made by another meanwhile ends its migration transaction (it once stayed open, and
// the run's rows rolled back when the store closed, though the run had reported "finished").
TEST(RunStore, RunsWrittenAtOnceIntoANewStoreAreAllKept) {
    constexpr int kWriters = 4;
    for (int round = 0; round < 25; ++round) {
        const std::string path = ::testing::TempDir() + "/together-" + std::to_string(::getpid()) + "-" +
                                 std::to_string(round) + ".db";
        std::remove(path.c_str());
        std::atomic<int> ready{0};
        std::string errors;
        std::mutex m;
        auto write_a_run = [&](int w) {
            ++ready;
            while (ready.load() < kWriters) std::this_thread::yield();  // all open at once
            try {
                store::RunStore db(path);
                const int64_t id = db.create_run(experiment("writer " + std::to_string(w)), {});
                db.add_records(id, {record(1, 0.5), record(2, 0.25)});
                db.finish_run(id, "finished", nlohmann::json{{"steps", 2}});
            } catch (const std::exception& e) {
                std::lock_guard lock(m);
                errors += e.what();
            }
        };
        std::vector<std::thread> writers;
        for (int w = 0; w < kWriters; ++w) writers.emplace_back(write_a_run, w);
        for (auto& t : writers) t.join();
        EXPECT_EQ(errors, "");
        store::RunStore db(path);
        const auto runs = db.list_runs();
        ASSERT_EQ(runs.size(), size_t(kWriters)) << "round " << round;
        for (const auto& r : runs) {
            EXPECT_EQ(r.status, "finished");
            EXPECT_EQ(db.loss_curve(r.run_id).size(), 2u);
        }
        std::remove(path.c_str());
        std::remove((path + "-wal").c_str());
        std::remove((path + "-shm").c_str());
    }
}

namespace {

// A finished run of `steps` steps with spans, an evaluation and a note.
int64_t record_run(store::RunStore& db, const std::string& name, int64_t steps) {
    int64_t id = 0;
    store::RunRecorder rec(db, nlohmann::json{{"paralab", 1}, {"name", name}});
    rec.on_start(experiment(name), steps);
    id = rec.run_id();
    for (int64_t s = 1; s <= steps; ++s) {
        config::Span sp;
        sp.step = s;
        sp.device = "cpu:0";
        sp.phase = "forward";
        sp.t_begin = static_cast<double>(s);
        sp.t_end = sp.t_begin + 0.5;
        rec.on_span(sp);
        rec.on_step(record(s, 1.0 / static_cast<double>(s)));
    }
    config::EvalResult ev;
    ev.step = steps;
    ev.loss = 0.25;
    ev.samples = 10;
    rec.on_eval(ev);
    config::RunSummary summary;
    summary.name = name;
    summary.steps = steps;
    rec.on_finish(summary);
    return id;
}

}  // namespace

// Hand-in: a student's selected runs go whole into a new file; the teacher imports every
// student's file into one store, each run with its rows, note and author.
TEST(RunStore, RunsAreHandedInAndCollected) {
    TempDir dir;
    setenv("PARALAB_AUTHOR", "Ada Lovelace", 1);
    const std::string student = (dir.path / "student.db").string();
    store::RunStore mine(student);
    const int64_t a = record_run(mine, "a", 12);
    record_run(mine, "not handed in", 3);
    const int64_t c = record_run(mine, "c", 7);
    mine.set_notes(c, "lr 0.01, my best");
    unsetenv("PARALAB_AUTHOR");
    EXPECT_EQ(mine.list_runs()[0].author, "Ada Lovelace");

    const std::string handin = (dir.path / "handin.db").string();
    const auto exported = mine.export_runs({a, c}, handin);
    ASSERT_EQ(exported.size(), 2u);
    // Never over a file that is there, nor with a run that is not.
    EXPECT_THROW(mine.export_runs({a}, handin), store::StoreError);
    EXPECT_THROW(mine.export_runs({a, 999}, (dir.path / "bad.db").string()), store::StoreError);
    EXPECT_FALSE(fs::exists(dir.path / "bad.db"));

    const std::string teacher = (dir.path / "class.db").string();
    store::RunStore all(teacher);
    record_run(all, "teacher's own", 2);
    const auto imported = all.import_runs(handin);
    ASSERT_EQ(imported.size(), 2u);
    const auto runs = all.list_runs();
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_EQ(runs[1].name, "a");
    EXPECT_EQ(runs[2].name, "c");
    EXPECT_EQ(runs[2].notes, "lr 0.01, my best");
    EXPECT_EQ(runs[2].author, "Ada Lovelace");
    EXPECT_EQ(runs[1].status, "finished");
    EXPECT_EQ(all.loss_curve(imported[0]).size(), 12u);
    EXPECT_EQ(all.spans(imported[1], 1, 7).size(), 7u);
    std::ostringstream csv;
    ASSERT_TRUE(all.export_csv(imported[1], csv));
    const std::string text = csv.str();
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 8);
    // What is not a ParaLab store, and the store itself, are refused; nothing is imported.
    const std::string junk = (dir.path / "junk.db").string();
    std::ofstream(junk) << "not a database at all, just text";
    EXPECT_THROW(all.import_runs(junk), store::StoreError);
    EXPECT_THROW(all.import_runs(teacher), store::StoreError);
    EXPECT_EQ(all.list_runs().size(), 3u);
}

// A store of schema 1 (no spans, no author) can be imported.
TEST(RunStore, AnOlderStoreIsImported) {
    TempDir dir;
    const std::string old = (dir.path / "old.db").string();
    store_testing::write_version1_store(old);
    store::RunStore all((dir.path / "all.db").string());
    const auto imported = all.import_runs(old);
    ASSERT_EQ(imported.size(), 1u);
    EXPECT_EQ(all.list_runs()[0].name, "old");
    EXPECT_EQ(all.list_runs()[0].author, "");
}

// A mixture-of-experts run's routing: each device's record keeps its layers' counts, and the
// store's curve sums them per step (a replica's tokens are its own), layer by layer.
TEST(RunStore, KeepsAndSumsTheMixtureOfExpertsRouting) {
    TempDir dir;
    store::RunStore db((dir.path / "runs.db").string());
    const int64_t id = db.create_run(experiment("moe"), {});
    const auto moe = [](int64_t a, int64_t b, int64_t dropped, double aux) {
        config::MoERecord m;
        m.layer = "model.layers[1] (transformer_block).mlp.moe";
        m.tokens_per_expert = {a, b};
        m.dropped_tokens = dropped;
        m.aux_loss = aux;
        m.router_z_loss = aux / 10;
        return m;
    };
    config::StepRecord r0 = record(1, 0.5), r1 = record(1, 0.5), plain = record(2, 0.4);
    r1.device = "cpu:1";
    r0.moe = {moe(3, 5, 1, 0.25)};
    r1.moe = {moe(4, 2, 0, 0.5)};
    db.add_records(id, {r0, r1, plain});
    const std::vector<store::MoEPoint> curve = db.moe_curve(id);
    ASSERT_EQ(curve.size(), 1u);  // step 2 recorded no routing
    EXPECT_EQ(curve[0].step, 1);
    ASSERT_EQ(curve[0].layers.size(), 1u);
    EXPECT_EQ(curve[0].layers[0].layer, r0.moe[0].layer);
    EXPECT_EQ(curve[0].layers[0].tokens_per_expert, (std::vector<int64_t>{7, 7}));
    EXPECT_EQ(curve[0].layers[0].dropped_tokens, 1);
    EXPECT_DOUBLE_EQ(curve[0].layers[0].aux_loss, 0.75);
    EXPECT_DOUBLE_EQ(curve[0].layers[0].router_z_loss, 0.075);
    EXPECT_TRUE(db.moe_curve(id + 1).empty());
}
