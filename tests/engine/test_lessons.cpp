// Lessons (docs/lessons.md): every shipped lesson loads; bad lesson files are refused with the
// file and the JSON path; the checker reads its quantities from a real run in a store and from
// the planner, and says right or wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "engine/lesson/lesson.h"
#include "engine/run/experiment_file.h"
#include "engine/run/trainer.h"
#include "engine/store/run_store.h"
#include "engine/util/error.h"
#include "store_testing.h"

using namespace paralab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kLessons = std::string(PARALAB_SOURCE_DIR) + "/resources/lessons";

std::vector<std::string> shipped_lessons() {
    std::vector<std::string> files;
    for (const auto& entry : fs::recursive_directory_iterator(kLessons))
        if (entry.path().string().ends_with(".lesson.json")) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    return files;
}

json spirals(const std::string& name, const json& devices, const json& strategy) {
    return json{{"paralab", 1},
                {"name", name},
                {"seed", 5},
                {"data", {{"dataset", "spirals"}, {"samples", 600}, {"classes", 3}, {"batch_size", 32}}},
                {"model",
                 {{"input", {2}},
                  {"layers", json::array({json{{"type", "linear"}, {"out", 16}}, json{{"type", "relu"}},
                                          json{{"type", "linear"}, {"out", 3}}})},
                  {"loss", "cross_entropy"}}},
                {"devices", devices},
                {"strategy", strategy},
                {"optimizer", {{"type", "sgd"}, {"lr", 0.1}}},
                {"train", {{"epochs", 1}, {"max_steps", 4}}}};
}

void write(const fs::path& path, const std::string& text) {
    std::ofstream out(path);
    out << text;
}

// A lesson folder with one runnable experiment ("single"), one 2-device ddp ("ddp") and the
// pipeline plan ("plan"), and `lesson` as its lesson file.
struct LessonDir {
    store_testing::TempDir dir;
    LessonDir() {
        write(dir.path / "text.md", "# A lesson\n\nRun it.\n");
        write(dir.path / "single.paralab.json", spirals("single", {"cpu:0"}, {{"type", "single"}}).dump(2));
        write(dir.path / "ddp.paralab.json", spirals("ddp", {"cpu:0", "cpu:1"}, {{"type", "ddp"}}).dump(2));
        fs::copy_file(kLessons + "/03-pipeline-bubble/plan-pp4-m4.plan.paralab.json", dir.path / "plan.paralab.json");
    }
    std::string path(const std::string& name) const { return (dir.path / name).string(); }
    // The lesson with `change` applied to its JSON, written as `name`.
    std::string lesson(const std::function<void(json&)>& change = {}, const std::string& name = "t.lesson.json") {
        json j = json::parse(R"({
          "paralab_lesson": 1, "title": "T", "text": "text.md",
          "experiments": [
            {"label": "single", "file": "single.paralab.json"},
            {"label": "ddp", "file": "ddp.paralab.json"},
            {"label": "plan", "file": "plan.paralab.json",
             "plan": {"cluster": "h100-80g", "nodes": 1, "gpus_per_node": 4}}
          ],
          "questions": [
            {"id": "a", "ask": "step time?", "source": "measured", "quantity": "step_time_ms",
             "experiment": "single", "tolerance": 0.25},
            {"id": "b", "kind": "choice", "ask": "more traffic?", "source": "measured",
             "quantity": "comm_mib_per_step", "experiments": ["single", "ddp"], "pick": "higher"},
            {"id": "c", "ask": "bubble?", "source": "planned", "quantity": "bubble_fraction",
             "experiment": "plan", "tolerance": 0.1}
          ]
        })");
        if (change) change(j);
        write(dir.path / name, j.dump(2));
        return path(name);
    }
};

std::string load_error(const std::string& path, const lesson::FileReader& read = nullptr) {
    try {
        (void)lesson::load_lesson(path, read);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Lessons, EveryShippedLessonLoads) {
    const auto files = shipped_lessons();
    EXPECT_EQ(files.size(), 6u);
    std::set<std::string> titles;
    for (const auto& file : files) {
        SCOPED_TRACE(file);
        const lesson::Lesson l = lesson::load_lesson(file);
        EXPECT_FALSE(l.text.empty());
        EXPECT_FALSE(l.questions.empty());
        EXPECT_TRUE(titles.insert(l.title).second);
        // Every planned question has its prediction now; every runnable experiment is one the
        // run accepts as it is.
        for (const auto& q : l.questions)
            if (q.source == lesson::Source::planned)
                for (const auto& label : q.experiments) {
                    const double v = lesson::planned_value(q.quantity, lesson::predict(*l.experiment(label)));
                    EXPECT_TRUE(std::isfinite(v)) << q.id;
                    EXPECT_GT(v, 0) << q.id;
                }
        for (const auto& x : l.experiments) {
            if (!x.plan) {
                EXPECT_NO_THROW((void)run::check_before_training(x.experiment)) << x.label;
            }
        }
    }
}

// The shipped planned questions: the answers their texts teach (the formulas, the published
// MFU, the right choices) are right against the planner, so that a change of the planner that
// breaks a lesson fails here.
TEST(Lessons, ShippedPlannedAnswersAreRight) {
    const std::map<std::string, std::string> answers{
        {"bubble-m1", "0.75"},          // (p−1)/(m+p−1), p = 4
        {"bubble-m4", "0.4286"},
        {"bubble-m16", "0.1579"},
        {"mfu", "0.45"},
        {"exposed", "one bucket, 32 GPUs"},
        {"schedule-memory-planned", "m = 16, 1f1b"},  // 1F1B
        {"tp1-memory", "tp 1"},
    };
    size_t checked = 0;
    for (const auto& file : shipped_lessons()) {
        const lesson::Lesson l = lesson::load_lesson(file);
        for (const auto& q : l.questions) {
            if (q.source != lesson::Source::planned) continue;
            SCOPED_TRACE(q.id);
            ASSERT_TRUE(answers.count(q.id));
            std::map<std::string, double> values;
            for (const auto& label : q.experiments)
                values[label] = lesson::planned_value(q.quantity, lesson::predict(*l.experiment(label)));
            const lesson::Verdict v = lesson::check(q, answers.at(q.id), values);
            EXPECT_TRUE(v.right) << v.message;
            ++checked;
        }
    }
    EXPECT_EQ(checked, answers.size());
    // And a wrong answer is wrong.
    const lesson::Lesson l = lesson::load_lesson(kLessons + "/03-pipeline-bubble/pipeline-bubble.lesson.json");
    const lesson::Question& q = l.questions[1];
    ASSERT_EQ(q.id, "bubble-m4");
    const double planned = lesson::planned_value(q.quantity, lesson::predict(*l.experiment("m = 4")));
    EXPECT_FALSE(lesson::check(q, "0.75", {{"m = 4", planned}}).right);
}

TEST(Lessons, BadFilesNameTheFileAndThePath) {
    LessonDir d;
    const std::string known =
        "step_time_ms, samples_per_s, peak_memory_mib, comm_mib_per_step, comm_overlap, final_loss, test_loss, "
        "test_accuracy, wall_s";
    // A comparison: versus names another experiment of the same source, and says how (as).
    std::string file = d.lesson([](json& j) { j["questions"][0]["versus"] = "ddp"; });
    EXPECT_EQ(load_error(file), file + ": questions[0].as: missing (saving or ratio: how the experiment is compared with \"versus\")");
    file = d.lesson([](json& j) { j["questions"][0]["as"] = "ratio"; });
    EXPECT_EQ(load_error(file), file + ": questions[0].as: needs \"versus\": the experiment it compares with");
    file = d.lesson([](json& j) {
        j["questions"][0]["versus"] = "single";
        j["questions"][0]["as"] = "ratio";
    });
    EXPECT_EQ(load_error(file), file + ": questions[0].versus: 'single' is the question's own experiment; compare it with another");
    file = d.lesson([](json& j) {
        j["questions"][0]["versus"] = "plan";
        j["questions"][0]["as"] = "saving";
    });
    EXPECT_NE(load_error(file).find("questions[0].versus: 'plan' is a planning experiment"), std::string::npos) << load_error(file);
    file = d.lesson([](json& j) { j["questions"][0]["quantity"] = "foo"; });
    EXPECT_EQ(load_error(file),
              file + ": questions[0].quantity: unknown quantity 'foo' for a measured question (known: " + known + ")");

    file = d.lesson([](json& j) { j["questions"][0]["experiment"] = "singel"; });
    EXPECT_EQ(load_error(file),
              file + ": questions[0].experiment: no experiment labelled 'singel' (the lesson's: single, ddp, plan)");

    file = d.lesson([](json& j) { j["questions"][0]["tolerence"] = 0.1; });
    EXPECT_NE(load_error(file).find(file + ": questions[0].tolerence: "), std::string::npos) << load_error(file);
    EXPECT_NE(load_error(file).find("tolerance"), std::string::npos) << load_error(file);

    file = d.lesson([](json& j) { j["questions"][2]["experiment"] = "single"; });
    EXPECT_EQ(load_error(file), file + ": questions[2].experiment: 'single' has no \"plan\" target: a planned question needs one");

    file = d.lesson([](json& j) { j["questions"][1].erase("pick"); });
    EXPECT_EQ(load_error(file), file + ": questions[1].pick: missing (higher or lower: which quantity the right choice has)");

    file = d.lesson([](json& j) { j["questions"][1]["id"] = "a"; });
    EXPECT_EQ(load_error(file), file + ": questions[1].id: 'a' is used twice");

    file = d.lesson([](json& j) { j["paralab_lesson"] = 2; });
    EXPECT_EQ(load_error(file), file + ": paralab_lesson: format 2 is newer than this ParaLab reads (1)");

    file = d.lesson([](json& j) { j.erase("paralab_lesson"); });
    EXPECT_EQ(load_error(file), file + ": paralab_lesson: missing (the lesson format, 1): is this a lesson file?");

    // A missing text, a missing experiment file: named with their resolved paths.
    file = d.lesson([](json& j) { j["text"] = "nope.md"; });
    EXPECT_EQ(load_error(file), file + ": text: " + d.path("nope.md") + ": no such file");
    file = d.lesson([](json& j) { j["experiments"][1]["file"] = "gone.paralab.json"; });
    EXPECT_NE(load_error(file).find(file + ": experiments[1].file: " + d.path("gone.paralab.json") + ": "), std::string::npos)
        << load_error(file);

    // A broken experiment is reported with its own file and JSON path.
    json bad = spirals("bad", {"cpu:0"}, {{"type", "single"}});
    bad["model"]["layers"][0]["out"] = -4;
    write(d.dir.path / "bad.paralab.json", bad.dump());
    file = d.lesson([](json& j) { j["experiments"][0]["file"] = "bad.paralab.json"; });
    EXPECT_NE(load_error(file).find(file + ": experiments[0].file: " + d.path("bad.paralab.json") + ": model.layers[0].out: "),
              std::string::npos)
        << load_error(file);

    // Not JSON at all.
    write(d.dir.path / "broken.lesson.json", "{\"paralab_lesson\": 1,");
    EXPECT_NE(load_error(d.path("broken.lesson.json")).find(d.path("broken.lesson.json") + ":"), std::string::npos);
    // An unknown cluster preset.
    file = d.lesson([](json& j) { j["experiments"][2]["plan"]["cluster"] = "z80"; });
    EXPECT_NE(load_error(file).find(file + ": experiments[2].plan.cluster: "), std::string::npos) << load_error(file);
}

// A lesson's text is a file inside its folder (no absolute path, no .., no link leading out) of
// at most 16 MiB; a key given twice in the lesson file is refused with its JSON path.
TEST(Lessons, TheTextStaysInsideTheLessonsFolderAndIsBounded) {
    LessonDir d;
    const std::string outside = "not inside the lesson's folder";
    fs::create_symlink("/etc/passwd", d.dir.path / "link.md");
    for (const std::string text : {"/etc/passwd", "../outside.md", "sub/../../outside.md", "link.md"}) {
        SCOPED_TRACE(text);
        const std::string file = d.lesson([&](json& j) { j["text"] = text; });
        EXPECT_NE(load_error(file).find(file + ": text: "), std::string::npos) << load_error(file);
        EXPECT_NE(load_error(file).find(outside), std::string::npos) << load_error(file);
    }
    fs::create_directories(d.dir.path / "sub");
    write(d.dir.path / "sub" / "inner.md", "# Inside\n");
    std::string file = d.lesson([](json& j) { j["text"] = "sub/inner.md"; });
    EXPECT_EQ(lesson::load_lesson(file).text, "# Inside\n");

    {
        std::ofstream big(d.dir.path / "big.md", std::ios::binary);
        const std::string mib(size_t{1} << 20, 'x');
        for (int i = 0; i < 17; ++i) big << mib;
    }
    file = d.lesson([](json& j) { j["text"] = "big.md"; });
    EXPECT_NE(load_error(file).find("larger than 16 MiB"), std::string::npos) << load_error(file);
    // Through a reader (the window's resources) the text's size is bounded too.
    const lesson::FileReader huge = [](const std::string& path) {
        return path.ends_with(".md") ? std::string((size_t{16} << 20) + 1, 'x') : lesson::read_disk_file(path);
    };
    file = d.lesson();
    EXPECT_NE(load_error(file, huge).find("text: larger than 16 MiB"), std::string::npos) << load_error(file, huge);

    write(d.dir.path / "dup.lesson.json", R"({"paralab_lesson": 1, "title": "T", "title": "U"})");
    EXPECT_EQ(load_error(d.path("dup.lesson.json")),
              d.path("dup.lesson.json") + ": title: duplicate key; a key appears once in an object");
}

// A lesson read through another reader (the window's, for compiled-in resources): paths are
// resolved against the lesson's, and the reader's own errors come through.
TEST(Lessons, ReadsThroughAGivenReader) {
    LessonDir d;
    const std::string file = d.lesson();
    std::vector<std::string> asked;
    const lesson::FileReader reader = [&](const std::string& path) {
        asked.push_back(path);
        return lesson::read_disk_file(path);
    };
    const lesson::Lesson l = lesson::load_lesson(file, reader);
    EXPECT_EQ(l.text, "# A lesson\n\nRun it.\n");
    EXPECT_EQ(asked.front(), file);
    EXPECT_EQ(l.experiment("ddp")->path, d.path("ddp.paralab.json"));
    EXPECT_EQ(asked.size(), 5u);  // the lesson, its text, three experiments
    const lesson::FileReader failing = [&](const std::string& path) -> std::string {
        if (path.ends_with("ddp.paralab.json")) throw ConfigError(path + ": cannot open the resource");
        return lesson::read_disk_file(path);
    };
    EXPECT_EQ(load_error(file, failing),
              file + ": experiments[1].file: " + d.path("ddp.paralab.json") + ": cannot open the resource");
}

// The checker on real runs: two experiments run a few steps through the engine into a store;
// the latest finished run of each is found by its experiment, and its quantities read.
TEST(Lessons, ChecksMeasuredQuestionsAgainstARealRun) {
    LessonDir d;
    const lesson::Lesson l = lesson::load_lesson(d.lesson());
    const std::string db_path = (d.dir.path / "runs.db").string();
    store::RunStore db(db_path);
    for (const char* label : {"single", "ddp"}) {
        const config::Experiment& e = l.experiment(label)->experiment;
        store::RunRecorder recorder(db, run::to_json(e));
        const config::RunSummary s = run::run_experiment(e, &recorder, nullptr);
        ASSERT_EQ(s.status, "finished") << s.error;
    }
    const auto rows = db.list_runs();
    const auto single = lesson::latest_run(rows, *l.experiment("single"));
    const auto ddp = lesson::latest_run(rows, *l.experiment("ddp"));
    ASSERT_TRUE(single && ddp);
    EXPECT_EQ(single->name, "single");
    EXPECT_EQ(ddp->name, "ddp");
    EXPECT_FALSE(lesson::latest_run(rows, *l.experiment("plan")));

    const double step_ms = lesson::measured_value("step_time_ms", *single, db);
    EXPECT_NEAR(step_ms, single->summary["wall_s"].get<double>() * 1000.0 / 4, 1e-9);
    EXPECT_GT(step_ms, 0);
    EXPECT_EQ(lesson::measured_value("comm_mib_per_step", *single, db), 0.0);
    // ddp: a ring all-reduce of the gradients (16·2+16 + 16·3+3 = 99 fp32) moves them once per
    // device on two devices, plus the start's broadcast of the replicas.
    const double mib = 99 * 4 / (1024.0 * 1024.0);
    EXPECT_GE(lesson::measured_value("comm_mib_per_step", *ddp, db), 2 * mib);
    EXPECT_GT(lesson::measured_value("peak_memory_mib", *ddp, db), 0);
    store::RunRow stopped = *single;
    stopped.status = "stopped";
    EXPECT_THROW((void)lesson::measured_value("step_time_ms", stopped, db), ConfigError);
    EXPECT_THROW((void)lesson::measured_value("mfu", *single, db), ConfigError);  // a planned quantity

    const lesson::Question& a = l.questions[0];
    const std::map<std::string, double> values{{"single", step_ms}};
    lesson::Verdict v = lesson::check(a, std::to_string(step_ms * 1.2), values);
    EXPECT_TRUE(v.right) << v.message;
    EXPECT_EQ(v.message.rfind("Right: the run measured ", 0), 0u) << v.message;
    v = lesson::check(a, std::to_string(step_ms * 1.3), values);
    EXPECT_FALSE(v.right) << v.message;
    EXPECT_NE(v.message.find(lesson::format_value(step_ms, "ms")), std::string::npos) << v.message;
    EXPECT_NE(v.message.find("25 %"), std::string::npos) << v.message;
    EXPECT_THROW((void)lesson::check(a, "fast", values), ConfigError);

    const lesson::Question& b = l.questions[1];
    const std::map<std::string, double> traffic{{"single", lesson::measured_value(b.quantity, *single, db)},
                                                {"ddp", lesson::measured_value(b.quantity, *ddp, db)}};
    EXPECT_TRUE(lesson::check(b, "ddp", traffic).right);
    EXPECT_FALSE(lesson::check(b, " single ", traffic).right);
    EXPECT_THROW((void)lesson::check(b, "zero", traffic), ConfigError);
    EXPECT_THROW((void)lesson::check(b, "ddp", {{"ddp", 1.0}}), ConfigError);  // a value missing

    // A run of an edited experiment is another experiment's run.
    config::Experiment edited = l.experiment("single")->experiment;
    edited.train.max_steps = 2;
    {
        store::RunRecorder recorder(db, run::to_json(edited));
        ASSERT_EQ(run::run_experiment(edited, &recorder, nullptr).status, "finished");
    }
    EXPECT_EQ(lesson::latest_run(db.list_runs(), *l.experiment("single"))->run_id, single->run_id);
}

// A comparison is graded on the saving or the ratio, and says both values it is made of.
TEST(Lessons, ComparisonsGradeTheSavingOrTheRatio) {
    lesson::Question q;
    q.id = "saving";
    q.kind = "value";
    q.source = lesson::Source::measured;
    q.quantity = "peak_memory_mib";
    q.experiments = {"zero 1", "ddp"};
    q.compare = "saving";
    q.tolerance = 0.25;
    const std::map<std::string, double> peaks{{"zero 1", 5.8}, {"ddp", 8.3}};
    lesson::Verdict v = lesson::check(q, "2.5", peaks);
    EXPECT_TRUE(v.right) << v.message;
    EXPECT_EQ(v.message, "Right: the saving is 2.5 MiB (the run measured zero 1 5.8 MiB, ddp 8.3 MiB); your 2.5 MiB is within 25 % of it.");
    EXPECT_FALSE(lesson::check(q, "0", peaks).right);  // "it saves nothing"
    // The peak itself is not the saving: 25 % of a peak would have accepted ddp's.
    EXPECT_FALSE(lesson::check(q, "5.8", peaks).right);
    q.compare = "ratio";
    v = lesson::check(q, "0.7", peaks);
    EXPECT_TRUE(v.right) << v.message;
    EXPECT_NE(v.message.find("the ratio is 0.699 ×"), std::string::npos) << v.message;
    EXPECT_FALSE(lesson::check(q, "1", peaks).right);
    EXPECT_THROW((void)lesson::check(q, "1", {{"zero 1", 5.8}, {"ddp", 0.0}}), ConfigError);
}

TEST(Lessons, ChecksPlannedQuestionsAgainstThePlanner) {
    LessonDir d;
    const lesson::Lesson l = lesson::load_lesson(d.lesson());
    const plan::Prediction p = lesson::predict(*l.experiment("plan"));
    EXPECT_EQ(p.devices, 4);
    EXPECT_EQ(p.mesh.pp, 4);
    EXPECT_EQ(p.mesh.micro_batches, 4);
    const double bubble = lesson::planned_value("bubble_fraction", p);
    EXPECT_NEAR(bubble, 3.0 / 7.0, 0.05);
    EXPECT_DOUBLE_EQ(lesson::planned_value("step_time_ms", p), p.step_time_s * 1000);
    const lesson::Question& c = l.questions[2];
    lesson::Verdict v = lesson::check(c, "0.43", {{"plan", bubble}});
    EXPECT_TRUE(v.right) << v.message;
    EXPECT_EQ(v.message.rfind("Right: the planner predicts ", 0), 0u) << v.message;
    v = lesson::check(c, "0.2", {{"plan", bubble}});
    EXPECT_FALSE(v.right) << v.message;
    EXPECT_EQ(v.message.rfind("Not quite: the planner predicts ", 0), 0u) << v.message;
    EXPECT_THROW((void)lesson::predict(*l.experiment("single")), ConfigError);
}

// Every question of every shipped lesson tells the idea from the misconception: each runnable
// experiment runs once into a store, and each question is checked with the answer its text
// teaches (right) and with the answer of the common wrong model (graded "Not quite"). The
// measured values are the lessons' claims, so a change of the engine that makes a lesson teach
// what its runs contradict fails here.
TEST(Lessons, EveryQuestionGradesTheIdeaRightAndTheMisconceptionWrong) {
    struct Answers {
        std::string idea, misconception;
    };
    // Keyed by lesson folder and question id.
    const std::map<std::string, Answers> answers{
        {"01-dp-vs-ddp/memory", {"data_parallel", "ddp"}},  // "the replicas cost memory"
        {"01-dp-vs-ddp/ddp-traffic", {"0.51", "0.257"}},     // "a ring moves the gradients once, in all"
        {"02-ddp-buckets/bytes", {"1", "3"}},                 // "three all-reduces move three times the bytes"
        {"02-ddp-buckets/overlap", {"1 MiB buckets", "one bucket"}},  // "any bucket overlaps"
        {"02-ddp-buckets/bucket-memory", {"1", "1.24"}},      // "one bucket needs a copy of the 8 MiB of gradients" (34 + 8 MiB)
        {"02-ddp-buckets/exposed", {"one bucket, 32 GPUs", "25 MB buckets, 32 GPUs"}},
        {"03-pipeline-bubble/bubble-m1", {"0.75", "0.25"}},   // "a stage idles 1/p of the time"
        {"03-pipeline-bubble/bubble-m4", {"0.4286", "0.75"}},  // "micro-batches do not change it"
        {"03-pipeline-bubble/bubble-m16", {"0.1579", "0.4286"}},
        {"03-pipeline-bubble/schedule-memory-planned", {"m = 16, 1f1b", "m = 16, gpipe"}},
        {"03-pipeline-bubble/schedule-memory-measured", {"1f1b", "gpipe"}},
        {"04-zero-memory/least-memory", {"zero 3", "ddp"}},
        {"04-zero-memory/zero1-saving", {"2.5", "0"}},        // "ZeRO-1 saves nothing"
        {"04-zero-memory/zero3-traffic", {"1.5", "1"}},       // "sharding costs no extra traffic"
        {"05-stragglers-async/sync-step", {"15", "5"}},       // "a step pays the mean sleep, not the maximum"
        {"05-stragglers-async/async-ratio", {"0.35", "1"}},   // "asynchrony never helps"
        {"05-stragglers-async/no-communication", {"hogwild", "async"}},
        {"06-tensor-parallel-mesh/tp-memory", {"tensor_parallel 2", "one device"}},
        {"06-tensor-parallel-mesh/mfu", {"0.45", "0.9"}},     // "GPUs run near their peak"
        {"06-tensor-parallel-mesh/tp1-memory", {"tp 1", "tp 8"}},
    };
    store_testing::TempDir dir;
    store::RunStore db((dir.path / "runs.db").string());
    size_t checked = 0;
    for (const auto& file : shipped_lessons()) {
        const lesson::Lesson l = lesson::load_lesson(file);
        const std::string folder = fs::path(file).parent_path().filename().string();
        for (const auto& x : l.experiments) {
            if (x.plan) continue;
            store::RunRecorder recorder(db, run::to_json(x.experiment));
            const config::RunSummary s = run::run_experiment(x.experiment, &recorder, nullptr);
            ASSERT_EQ(s.status, "finished") << x.label << ": " << s.error;
        }
        const auto rows = db.list_runs();
        for (const auto& q : l.questions) {
            const std::string key = folder + "/" + q.id;
            SCOPED_TRACE(key);
            std::map<std::string, double> values;
            for (const auto& label : q.experiments) {
                const lesson::LessonExperiment& x = *l.experiment(label);
                if (q.source == lesson::Source::planned) {
                    values[label] = lesson::planned_value(q.quantity, lesson::predict(x));
                } else {
                    const auto row = lesson::latest_run(rows, x);
                    ASSERT_TRUE(row) << label;
                    values[label] = lesson::measured_value(q.quantity, *row, db);
                }
                std::printf("%s: %s %s = %.4g\n", key.c_str(), label.c_str(), q.quantity.c_str(), values[label]);
            }
            if (!answers.count(key)) {
                ADD_FAILURE() << "no answers for " << key;
                continue;
            }
            const Answers& a = answers.at(key);
            const lesson::Verdict idea = lesson::check(q, a.idea, values);
            EXPECT_TRUE(idea.right) << idea.message;
            const lesson::Verdict wrong = lesson::check(q, a.misconception, values);
            EXPECT_FALSE(wrong.right) << wrong.message;
            EXPECT_EQ(wrong.message.rfind("Not quite: ", 0), 0u) << wrong.message;
            ++checked;
        }
    }
    EXPECT_EQ(checked, answers.size());
}
