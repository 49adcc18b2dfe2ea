#include "engine/lesson/lesson.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "engine/plan/cluster.h"
#include "engine/plan/plan_model.h"
#include "engine/run/experiment_file.h"
#include "engine/run/json_reader.h"
#include "engine/util/error.h"
#include "engine/util/printable.h"

namespace paralab::lesson {

using nlohmann::json;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

std::string joined(const std::vector<std::string>& words) {
    std::string out;
    for (const auto& w : words) {
        if (!out.empty()) out += ", ";
        out += w;
    }
    return out;
}

std::string names_of(Source s) {
    std::vector<std::string> names;
    for (const auto& q : quantities(s)) names.push_back(q.name);
    return joined(names);
}

// `file` relative to the folder of `lesson_path` (an absolute one as it is).
std::string resolve(const std::string& lesson_path, const std::string& file) {
    if (!file.empty() && file.front() == '/') return file;
    const std::filesystem::path dir = std::filesystem::path(lesson_path).parent_path();
    return (dir / file).lexically_normal().string();
}

// The lesson's text file: `file` relative to the lesson's folder and inside it. On the disk the
// path is resolved (symbolic links followed) before it is compared, so that a link inside the
// folder cannot lead out of it.
std::string text_inside_folder(const std::string& lesson_path, const std::string& file, bool on_disk) {
    namespace fs = std::filesystem;
    const fs::path relative = fs::path(file).lexically_normal();
    const auto outside = [&] {
        return ConfigError(printable(file) + ": not inside the lesson's folder; the text is a file beside the lesson "
                           "file or below it (a relative path without ..)");
    };
    if (relative.is_absolute() || relative.empty() || *relative.begin() == "..") throw outside();
    const fs::path folder = fs::path(lesson_path).parent_path();
    const fs::path joined = (folder / relative).lexically_normal();
    if (on_disk) {
        std::error_code ec;
        const fs::path real_folder = fs::weakly_canonical(folder.empty() ? fs::path(".") : folder, ec);
        const fs::path real_file = ec ? fs::path() : fs::weakly_canonical(joined, ec);
        if (ec) throw ConfigError(joined.string() + ": cannot resolve the path: " + ec.message());
        const fs::path inside = real_file.lexically_relative(real_folder);
        if (inside.empty() || *inside.begin() == "..") throw outside();
    }
    return joined.string();
}

json parse_text(const std::string& text, const std::string& path) { return run::parse_json_text(text, path); }

std::string required_string(run::JsonObjectReader& r, const std::string& key) {
    if (!r.has(key)) r.fail(key, "missing (a non-empty string)");
    const json& v = r.raw(key);
    if (!v.is_string() || v.get<std::string>().empty())
        r.fail(key, "expected a non-empty string, got " + run::describe_json(v));
    return v.get<std::string>();
}

void read_experiment(LessonExperiment& x, const FileReader& read) {
    if (x.plan) {
        x.plan_file = read ? plan::plan_file_from_json(parse_text(read(x.path), x.path), x.path)
                           : plan::read_plan_file(x.path);
        x.experiment = x.plan_file->experiment;
        return;
    }
    if (read) {
        const json j = parse_text(read(x.path), x.path);
        try {
            x.experiment = run::parse_experiment(j);
        } catch (const ConfigError& e) {
            std::string message = x.path;
            message += ": ";
            message += e.what();
            throw ConfigError(message);
        }
    } else {
        x.experiment = run::load_experiment(x.path);
    }
    x.config = run::to_json(x.experiment);
}

LessonExperiment parse_experiment_entry(const json& item, const std::string& where, const std::string& lesson_path) {
    run::JsonObjectReader r(item, where);
    LessonExperiment x;
    x.label = required_string(r, "label");
    x.file = required_string(r, "file");
    x.path = resolve(lesson_path, x.file);
    if (r.has("plan")) {
        run::JsonObjectReader p(r.raw("plan"), r.path_of("plan"));
        PlanTarget t;
        t.cluster = p.string("cluster", t.cluster);
        t.nodes = static_cast<int>(p.integer("nodes", 0, 1, 1000000));
        t.gpus_per_node = static_cast<int>(p.integer("gpus_per_node", 0, 1, 4096));
        p.finish();
        if (t.cluster.ends_with(".json")) t.cluster = resolve(lesson_path, t.cluster);
        try {
            (void)plan::load_cluster(t.cluster);
        } catch (const ConfigError& e) {
            p.fail("cluster", e.what());
        }
        x.plan = t;
    }
    r.finish();
    return x;
}

Question parse_question(const json& item, const std::string& where, const Lesson& lesson) {
    run::JsonObjectReader r(item, where);
    Question q;
    q.id = required_string(r, "id");
    q.kind = r.choice("kind", "value", {"value", "choice"});
    q.ask = required_string(r, "ask");
    if (!r.has("source")) r.fail("source", "missing (measured or planned)");
    q.source = r.required_choice("source", {"measured", "planned"}) == "planned" ? Source::planned : Source::measured;
    q.quantity = required_string(r, "quantity");
    if (!find_quantity(q.source, q.quantity))
        r.fail("quantity", "unknown quantity '" + q.quantity + "' for a " + source_name(q.source) +
                               " question (known: " + names_of(q.source) + ")");
    const auto check_label = [&](const std::string& key, const std::string& label) {
        const LessonExperiment* x = lesson.experiment(label);
        if (!x) {
            std::vector<std::string> labels;
            for (const auto& e : lesson.experiments) labels.push_back(e.label);
            r.fail(key, "no experiment labelled '" + label + "' (the lesson's: " + joined(labels) + ")");
        }
        if (q.source == Source::planned && !x->plan)
            r.fail(key, "'" + label + "' has no \"plan\" target: a planned question needs one");
        if (q.source == Source::measured && x->plan)
            r.fail(key, "'" + label + "' is a planning experiment (it has \"plan\"): a measured question needs one that runs");
    };
    if (q.kind == "value") {
        const std::string label = required_string(r, "experiment");
        check_label("experiment", label);
        q.experiments = {label};
        q.tolerance = r.number("tolerance", 0.25, 0.0, 10.0, false);
        // Asked as a comparison: the saving against, or the ratio to, another experiment.
        if (r.has("versus")) {
            const std::string other = required_string(r, "versus");
            check_label("versus", other);
            if (other == label) r.fail("versus", "'" + other + "' is the question's own experiment; compare it with another");
            q.experiments.push_back(other);
            const auto as = r.required_choice("as", {"saving", "ratio"});
            if (!as) r.fail("as", "missing (saving or ratio: how the experiment is compared with \"versus\")");
            q.compare = *as;
        } else if (r.has("as")) {
            r.fail("as", "needs \"versus\": the experiment it compares with");
        }
    } else {
        if (!r.has("experiments")) r.fail("experiments", "missing (two or more experiment labels)");
        const json& list = r.raw("experiments");
        if (!list.is_array() || list.size() < 2)
            r.fail("experiments", "expected an array of two or more experiment labels, got " + run::describe_json(list));
        for (size_t i = 0; i < list.size(); ++i) {
            const std::string key = "experiments[" + std::to_string(i) + "]";
            if (!list[i].is_string()) r.fail(key, "expected a label, got " + run::describe_json(list[i]));
            const std::string label = list[i].get<std::string>();
            check_label(key, label);
            if (std::find(q.experiments.begin(), q.experiments.end(), label) != q.experiments.end())
                r.fail(key, "'" + label + "' is listed twice");
            q.experiments.push_back(label);
        }
        const auto pick = r.required_choice("pick", {"higher", "lower"});
        if (!pick) r.fail("pick", "missing (higher or lower: which quantity the right choice has)");
        q.pick = *pick;
    }
    q.explain = r.string("explain", "");
    r.finish();
    return q;
}

Lesson parse_lesson(const json& j, const std::string& path, const FileReader& read) {
    run::JsonObjectReader r(j, "");
    Lesson lesson;
    lesson.path = path;
    if (!r.has("paralab_lesson")) r.fail("paralab_lesson", "missing (the lesson format, 1): is this a lesson file?");
    const int64_t format = *r.integer("paralab_lesson", 1);
    if (format > kLessonFormat)
        r.fail("paralab_lesson", "format " + std::to_string(format) + " is newer than this ParaLab reads (" +
                                     std::to_string(kLessonFormat) + ")");
    lesson.title = required_string(r, "title");
    lesson.summary = r.string("summary", "");
    const std::string text = required_string(r, "text");
    try {
        lesson.text_file = text_inside_folder(path, text, !read);
        lesson.text = read ? read(lesson.text_file) : read_disk_file(lesson.text_file);
    } catch (const ConfigError& e) {
        r.fail("text", e.what());
    }
    if (lesson.text.size() > kMaxLessonFileBytes) r.fail("text", "larger than 16 MiB, the most a lesson's text may hold");

    if (!r.has("experiments")) r.fail("experiments", "missing (an array of {\"label\", \"file\"})");
    const json& experiments = r.raw("experiments");
    if (!experiments.is_array() || experiments.empty())
        r.fail("experiments", "expected a non-empty array, got " + run::describe_json(experiments));
    for (size_t i = 0; i < experiments.size(); ++i) {
        const std::string where = "experiments[" + std::to_string(i) + "]";
        LessonExperiment x = parse_experiment_entry(experiments[i], where, path);
        if (lesson.experiment(x.label)) throw ConfigError(where + ".label", "'" + x.label + "' is used twice");
        try {
            read_experiment(x, read);
        } catch (const ConfigError& e) {  // the experiment's own file, path and message
            throw ConfigError(where + ".file", e.what());
        }
        lesson.experiments.push_back(std::move(x));
    }

    if (!r.has("questions")) r.fail("questions", "missing (an array of questions)");
    const json& questions = r.raw("questions");
    if (!questions.is_array() || questions.empty())
        r.fail("questions", "expected a non-empty array, got " + run::describe_json(questions));
    std::set<std::string> ids;
    for (size_t i = 0; i < questions.size(); ++i) {
        const std::string where = "questions[" + std::to_string(i) + "]";
        Question q = parse_question(questions[i], where, lesson);
        if (!ids.insert(q.id).second) throw ConfigError(where + ".id", "'" + q.id + "' is used twice");
        lesson.questions.push_back(std::move(q));
    }
    r.finish();
    return lesson;
}

}  // namespace

const char* source_name(Source s) { return s == Source::planned ? "planned" : "measured"; }

const std::vector<QuantityInfo>& quantities(Source s) {
    static const std::vector<QuantityInfo> measured{
        {"step_time_ms", "ms", "training time per optimizer step (wall_s / steps)"},
        {"samples_per_s", "samples/s", "training throughput of the run"},
        {"peak_memory_mib", "MiB", "the largest peak memory of any device"},
        {"comm_mib_per_step", "MiB", "bytes moved by communication per step, all devices together"},
        {"comm_overlap", "", "the share of the communication bytes whose span starts before its device's backward of the step has ended (0–1)"},
        {"final_loss", "", "the last step's training loss"},
        {"test_loss", "", "the loss on the test split at the end"},
        {"test_accuracy", "", "the accuracy on the test split at the end (0–1)"},
        {"wall_s", "s", "training time of the run"},
    };
    static const std::vector<QuantityInfo> planned{
        {"step_time_ms", "ms", "predicted time of one optimizer step"},
        {"samples_per_s", "samples/s", "predicted throughput"},
        {"tokens_per_s", "tokens/s", "predicted throughput in tokens"},
        {"mfu", "", "model FLOPs utilization (0–1)"},
        {"memory_gib", "GiB", "the most loaded device's memory"},
        {"bubble_fraction", "", "pipeline bubble / (compute + recompute + bubble) of the busiest stage"},
        {"tp_comm_ms", "ms", "tensor-parallel communication per step"},
        {"dp_comm_ms", "ms", "data-parallel gradient communication per step (not overlapped)"},
    };
    return s == Source::planned ? planned : measured;
}

const QuantityInfo* find_quantity(Source s, const std::string& name) {
    for (const auto& q : quantities(s))
        if (q.name == name) return &q;
    return nullptr;
}

const LessonExperiment* Lesson::experiment(const std::string& label) const {
    for (const auto& e : experiments)
        if (e.label == label) return &e;
    return nullptr;
}

std::string read_disk_file(const std::string& path, size_t max_bytes) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw ConfigError(path + ": no such file");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw ConfigError(path + ": cannot open the file");
    std::string text;
    std::vector<char> piece(size_t{1} << 16);
    while (in.read(piece.data(), static_cast<std::streamsize>(piece.size())) || in.gcount() > 0) {
        text.append(piece.data(), static_cast<size_t>(in.gcount()));
        if (text.size() > max_bytes)
            throw ConfigError(path + ": larger than " + std::to_string(max_bytes >> 20) + " MiB, the most a lesson's file may hold");
    }
    return text;
}

Lesson load_lesson(const std::string& path, const FileReader& read) {
    json j;
    if (read)
        j = parse_text(read(path), path);
    else
        j = run::read_json_file(path, "lesson file");
    try {
        return parse_lesson(j, path, read);
    } catch (const ConfigError& e) {
        throw ConfigError(path + ": " + e.what());
    }
}

std::optional<store::RunRow> latest_run(const std::vector<store::RunRow>& rows, const LessonExperiment& e) {
    if (e.plan) return std::nullopt;
    for (auto it = rows.rbegin(); it != rows.rend(); ++it)
        if (it->status == "finished" && it->config == e.config) return *it;
    return std::nullopt;
}

double measured_value(const std::string& quantity, const store::RunRow& row, store::RunStore& store) {
    const std::string run = "run " + std::to_string(row.run_id);
    if (row.status != "finished" || !row.summary.is_object())
        throw ConfigError(run + " is " + row.status + ", not finished");
    const json& s = row.summary;
    const auto number = [&](const char* key) {
        if (!s.contains(key) || !s[key].is_number())
            throw ConfigError(run + " has no " + std::string(key));
        return s[key].get<double>();
    };
    const double steps = number("steps");
    if (quantity == "step_time_ms") {
        if (steps <= 0) throw ConfigError(run + " made no step");
        return number("wall_s") * 1000.0 / steps;
    }
    if (quantity == "samples_per_s") return number("samples_per_s");
    if (quantity == "wall_s") return number("wall_s");
    if (quantity == "final_loss") return number("final_loss");
    if (quantity == "test_loss") return number("test_loss");
    if (quantity == "test_accuracy") return number("test_accuracy");
    if (quantity == "peak_memory_mib") {
        double peak = 0;
        if (s.contains("peak_memory_bytes") && s["peak_memory_bytes"].is_object())
            for (const auto& [device, bytes] : s["peak_memory_bytes"].items())
                if (bytes.is_number()) peak = std::max(peak, bytes.get<double>());
        if (peak <= 0) throw ConfigError(run + " recorded no memory");
        return peak / kMiB;
    }
    if (quantity == "comm_overlap") {
        if (steps <= 0) throw ConfigError(run + " made no step");
        // Per device and step: when its (last) backward ended; then which bytes started before.
        const auto spans = store.spans(row.run_id, 1, static_cast<int64_t>(steps));
        std::map<std::pair<std::string, int64_t>, double> backward_end;
        for (const auto& span : spans)
            if (span.phase == "backward") {
                double& end = backward_end[{span.device, span.step}];
                end = std::max(end, span.t_end);
            }
        double all = 0, overlapped = 0;
        for (const auto& span : spans) {
            if (span.bytes <= 0) continue;
            all += static_cast<double>(span.bytes);
            const auto it = backward_end.find({span.device, span.step});
            if (it != backward_end.end() && span.t_begin < it->second) overlapped += static_cast<double>(span.bytes);
        }
        if (all <= 0) throw ConfigError(run + " moved no bytes");
        return overlapped / all;
    }
    if (quantity == "comm_mib_per_step") {
        if (steps <= 0) throw ConfigError(run + " made no step");
        double bytes = 0;
        for (const auto& span : store.spans(row.run_id, 1, static_cast<int64_t>(steps)))
            bytes += static_cast<double>(span.bytes);
        return bytes / steps / kMiB;
    }
    throw ConfigError("unknown measured quantity '" + quantity + "' (known: " + names_of(Source::measured) + ")");
}

plan::Prediction predict(const LessonExperiment& e) {
    if (!e.plan || !e.plan_file) throw ConfigError(e.label + ": not a planning experiment (it has no \"plan\")");
    const PlanTarget& t = *e.plan;
    plan::Cluster cluster = plan::load_cluster(t.cluster);
    const bool preset = !t.cluster.ends_with(".json");
    if (t.gpus_per_node > 0) cluster.gpus_per_node = t.gpus_per_node;
    if (t.nodes > 0) cluster.nodes = t.nodes;
    const auto mesh_of = [&](int devices) {
        try {
            return plan::mesh_of(*e.plan_file, devices);
        } catch (const ConfigError& err) {
            throw ConfigError(e.path + ": " + err.what());
        }
    };
    // As `paralab plan`: a preset without nodes gets as many as the mesh needs.
    if (preset && t.nodes == 0) {
        const int wanted = mesh_of(cluster.devices()).devices();
        if (wanted % cluster.gpus_per_node == 0)
            cluster.nodes = wanted / cluster.gpus_per_node;
        else if (wanted < cluster.gpus_per_node && t.gpus_per_node == 0)
            cluster.gpus_per_node = wanted;
    }
    const plan::Mesh mesh = mesh_of(cluster.devices());
    const plan::PlanModel model = plan::plan_model(e.plan_file->experiment);
    plan::Prediction p = plan::predict(e.plan_file->experiment, model, cluster, mesh);
    if (!p.skipped.empty()) throw ConfigError(e.path + ": cannot be planned: " + p.skipped);
    return p;
}

double planned_value(const std::string& quantity, const plan::Prediction& p) {
    const plan::Breakdown& b = p.breakdown;
    if (quantity == "step_time_ms") return p.step_time_s * 1000.0;
    if (quantity == "samples_per_s") return p.samples_per_s;
    if (quantity == "tokens_per_s") return p.tokens_per_s;
    if (quantity == "mfu") return p.mfu;
    if (quantity == "memory_gib") return p.memory_total / kGiB;
    if (quantity == "bubble_fraction") {
        const double whole = b.compute + b.recompute + b.pp_bubble;
        return whole > 0 ? b.pp_bubble / whole : 0.0;
    }
    if (quantity == "tp_comm_ms") return b.tp_comm * 1000.0;
    if (quantity == "dp_comm_ms") return b.dp_comm * 1000.0;
    throw ConfigError("unknown planned quantity '" + quantity + "' (known: " + names_of(Source::planned) + ")");
}

std::string format_value(double v, const std::string& unit) {
    char buffer[64];
    if (std::fabs(v) >= 1000)
        std::snprintf(buffer, sizeof buffer, "%.0f", v);
    else
        std::snprintf(buffer, sizeof buffer, "%.3g", v);
    std::string out = buffer;
    if (!unit.empty()) {
        out += " ";
        out += unit;
    }
    return out;
}

Verdict check(const Question& q, const std::string& answer, const std::map<std::string, double>& values) {
    const QuantityInfo* info = find_quantity(q.source, q.quantity);
    const std::string unit = info ? info->unit : "";
    Verdict v;
    for (const auto& label : q.experiments) {
        const auto it = values.find(label);
        if (it == values.end()) throw ConfigError(q.id + ": no " + q.quantity + " of '" + label + "' to check against");
        v.values[label] = it->second;
    }
    const std::string said = q.source == Source::planned ? "the planner predicts " : "the run measured ";
    std::string a = answer;
    a.erase(0, a.find_first_not_of(" \t\n"));
    a.erase(a.find_last_not_of(" \t\n") + 1);
    if (q.kind == "value") {
        double truth = v.values[q.experiments[0]];
        std::string shown_unit = unit;
        if (q.compare == "saving") {
            truth = v.values[q.experiments[1]] - truth;
        } else if (q.compare == "ratio") {
            const double base = v.values[q.experiments[1]];
            if (base == 0) throw ConfigError(q.id + ": " + q.experiments[1] + "'s " + q.quantity + " is 0: no ratio to it");
            truth /= base;
            shown_unit = "×";
        }
        char* end = nullptr;
        const double x = std::strtod(a.c_str(), &end);
        if (a.empty() || end != a.c_str() + a.size() || !std::isfinite(x))
            throw ConfigError(q.id + ": expected a number, got '" + a + "'");
        const double allowed = q.tolerance * std::fabs(truth);
        v.right = std::fabs(x - truth) <= allowed;
        char pct[32];
        std::snprintf(pct, sizeof pct, "%.0f %%", q.tolerance * 100);
        v.message = v.right ? "Right: " : "Not quite: ";
        if (q.compare.empty()) {
            v.message += said + format_value(truth, unit);
        } else {
            // The comparison and the two values it is made of.
            v.message += (q.compare == "saving" ? "the saving is " : "the ratio is ") + format_value(truth, shown_unit) +
                         " (" + said + q.experiments[0] + " " + format_value(v.values[q.experiments[0]], unit) + ", " +
                         q.experiments[1] + " " + format_value(v.values[q.experiments[1]], unit) + ")";
        }
        v.message += "; your " + format_value(x, shown_unit) + " is " + (v.right ? "within " : "not within ") + pct +
                     " of it.";
    } else {
        std::string best;
        for (const auto& [label, value] : v.values)
            if (best.empty() || (q.pick == "higher" ? value > v.values[best] : value < v.values[best])) best = label;
        if (!v.values.count(a)) {
            std::string message = q.id;
            message += ": expected one of ";
            message += joined(q.experiments);
            message += ", got '" + a + "'";
            throw ConfigError(message);
        }
        v.right = a == best;
        v.message = v.right ? "Right: " : "Not quite: ";
        v.message += best + " has the " + q.pick + " " + q.quantity + " — " + said;
        bool first = true;
        for (const auto& label : q.experiments) {
            if (!first) v.message += ", ";
            first = false;
            v.message += label + " " + format_value(v.values[label], unit);
        }
        v.message += ".";
    }
    if (!q.explain.empty()) v.message += " " + q.explain;
    return v;
}

}  // namespace paralab::lesson
