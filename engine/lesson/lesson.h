// Lessons (docs/lessons.md): a `*.lesson.json` file with a Markdown text, experiment files and
// "predict, then run" questions. This reads and validates a lesson (every error names the file
// and the JSON path), reads the quantities a question asks about from a finished run in the run
// store or from the planner's prediction, and checks a student's answer against them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/config/experiment.h"
#include "engine/plan/mesh.h"
#include "engine/plan/planner.h"
#include "engine/store/run_store.h"

namespace paralab::lesson {

// The newest lesson format this build reads (the file's "paralab_lesson").
constexpr int kLessonFormat = 1;

enum class Source { measured, planned };
const char* source_name(Source s);

// What a question can ask about, by where it is read from.
struct QuantityInfo {
    std::string name;
    std::string unit;         // for people: "ms", "MiB", "" (a ratio)
    std::string description;  // one line, for the reference and the panel
};
// The quantities of a finished run (the store's summary and spans), and of a prediction.
const std::vector<QuantityInfo>& quantities(Source s);
const QuantityInfo* find_quantity(Source s, const std::string& name);

// Where a planned experiment is predicted: a cluster preset (plan::preset_names()) or a cluster
// file, with `nodes` and `gpus_per_node` (0: as `paralab plan` chooses them).
struct PlanTarget {
    std::string cluster = "a100-80g";
    int nodes = 0;
    int gpus_per_node = 0;
};

struct LessonExperiment {
    std::string label;        // how questions name it
    std::string file;         // as written in the lesson
    std::string path;         // resolved: relative to the lesson file
    std::optional<PlanTarget> plan;  // set: a planning experiment (read as `paralab plan` reads it)
    config::Experiment experiment;   // a planning experiment's without its strategy (plan_file)
    std::optional<plan::PlanFile> plan_file;
    nlohmann::json config;    // run::to_json(experiment) of a runnable one: how its runs are found
};

struct Question {
    std::string id;
    std::string kind;  // "value": a number; "choice": one of `experiments`
    std::string ask;   // the question, for people (Markdown allowed)
    Source source = Source::measured;
    std::string quantity;
    // A value question: its label, then the `versus` label when it compares; a choice: two or more.
    std::vector<std::string> experiments;
    // A value question with `versus`: "saving" (versus's value − the experiment's) or "ratio"
    // (the experiment's / versus's); empty: the experiment's value itself.
    std::string compare;
    std::string pick;         // a choice: "higher" or "lower" (the right answer's quantity)
    double tolerance = 0.25;  // a value: relative (|answer − true| ≤ tolerance · |true|)
    std::string explain;      // shown after the check (optional)
};

struct Lesson {
    std::string path;   // the lesson file as given
    std::string title;
    std::string summary;    // one line for the lesson list (optional)
    std::string text_file;  // resolved path of the Markdown text
    std::string text;       // its content
    std::vector<LessonExperiment> experiments;
    std::vector<Question> questions;

    const LessonExperiment* experiment(const std::string& label) const;
};

// Reads a file's bytes; throws ConfigError("PATH: ...") when it cannot. The window passes one
// that also reads its compiled-in resources (":/lessons/...").
using FileReader = std::function<std::string(const std::string& path)>;
// A regular file of at most `max_bytes` (a lesson's files: kMaxLessonFileBytes), read in pieces
// so that a larger one is refused without being read whole.
constexpr size_t kMaxLessonFileBytes = size_t{16} << 20;
std::string read_disk_file(const std::string& path, size_t max_bytes = kMaxLessonFileBytes);

// Reads and validates the lesson at `path`: its JSON (unknown keys refused), its text, and every
// experiment through the experiment parser (or the planner's reader, for a planning one). The
// text is a file inside the lesson's folder (a relative path that stays inside it, symbolic
// links resolved) of at most 16 MiB. Throws
// ConfigError naming the file and the JSON path of the first problem, e.g.
// "x.lesson.json: questions[2].quantity: unknown quantity 'foo' (known: ...)", or the
// experiment file's own message for a broken experiment. With `read`, files are read through it
// (experiments then parsed from their text); without, from the disk.
Lesson load_lesson(const std::string& path, const FileReader& read = nullptr);

// The latest finished run of `e` in `rows` (the store's list, oldest first): the same
// experiment field for field (its canonical JSON); nullopt when there is none.
std::optional<store::RunRow> latest_run(const std::vector<store::RunRow>& rows, const LessonExperiment& e);

// A measured quantity of a finished run; `store` is read for the quantities of its spans.
// Throws ConfigError when the run does not have it (no test accuracy, not finished).
double measured_value(const std::string& quantity, const store::RunRow& row, store::RunStore& store);

// The planner's prediction of a planning experiment on its target (as `paralab plan FILE
// --cluster C --nodes N --gpus-per-node G`). Throws ConfigError when it cannot be planned.
plan::Prediction predict(const LessonExperiment& e);
double planned_value(const std::string& quantity, const plan::Prediction& p);

struct Verdict {
    bool right = false;
    std::string message;  // for people: "Right: ..." / "Not quite: ..." with the true values
    std::map<std::string, double> values;  // per experiment label, what was measured or planned
};

// Checks `answer` against `values` (each of the question's experiments' quantity). A value
// question wants a number (a malformed one is a ConfigError naming the question); a choice wants
// one of the labels. Throws ConfigError when a value is missing.
Verdict check(const Question& q, const std::string& answer, const std::map<std::string, double>& values);

// A number for people: 3 significant digits, then the unit.
std::string format_value(double v, const std::string& unit);

}  // namespace paralab::lesson
