// The strategy registry (engine/strategy/registry.h): every strategy declares itself whole,
// the parser and to_json are made from its option declarations, errors carry their JSON path
// as data, and docs/experiment-format.md's table of options is the one the registry writes.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "engine/run/experiment_file.h"
#include "engine/strategy/registry.h"
#include "engine/strategy/strategy.h"
#include "engine/util/error.h"

namespace paralab {
namespace {

using nlohmann::json;

json spirals(const json& strategy, int devices = 1) {
    json d = json::array();
    for (int k = 0; k < devices; ++k) d.push_back("cpu:" + std::to_string(k));
    return {{"paralab", 1},
            {"data", {{"dataset", "spirals"}, {"samples", 64}, {"batch_size", 16}}},
            {"model", {{"input", {2}}, {"layers", {{{"type", "linear"}, {"out", 8}}, {{"type", "relu"}}, {{"type", "linear"}, {"out", 2}}}}}},
            {"devices", d},
            {"strategy", strategy}};
}

TEST(Registry, EveryStrategyDeclaresItselfWhole) {
    std::set<std::string> names, colors;
    for (const auto& d : strategy::registry()) {
        SCOPED_TRACE(d.name);
        EXPECT_TRUE(names.insert(d.name).second) << "listed twice";
        EXPECT_TRUE(colors.insert(d.color).second) << "shares a colour";
        EXPECT_TRUE(std::regex_match(d.color, std::regex("#[0-9a-f]{6}")));
        EXPECT_GT(d.explanation.size(), 80u);
        ASSERT_TRUE(d.make);
        EXPECT_EQ(d.make()->name(), d.name);
        std::set<std::string> keys;
        for (const auto& o : d.options) {
            EXPECT_TRUE(keys.insert(o.key).second) << o.key << " declared twice";
            EXPECT_FALSE(o.label.empty()) << o.key;
            EXPECT_FALSE(o.help.empty()) << o.key;
            if (o.kind == config::OptionKind::choice) {
                const auto& fallback = std::get<std::string>(o.fallback);
                EXPECT_NE(std::find(o.choices.begin(), o.choices.end(), fallback), o.choices.end()) << o.key;
            }
            if (!o.shown_when_key.empty()) {
                EXPECT_TRUE(d.option(o.shown_when_key)) << o.key;
            }
        }
        // Its memory model and its picture on three devices: one entry per device.
        config::Experiment e = run::parse_experiment(spirals({{"type", d.name}}, 3));
        strategy::ModelCost cost = strategy::model_cost(e, Shape{2});
        EXPECT_EQ(cost.parameters(), 2 * 8 + 8 + 8 * 2 + 2);
        const auto memory = strategy::estimate_memory(e, cost);
        ASSERT_EQ(memory.size(), 3u);
        int64_t parameters = 0;
        for (const auto& m : memory) parameters += m.bytes[static_cast<size_t>(MemCategory::parameters)];
        EXPECT_GE(parameters, cost.parameters() * 4) << "the parameters live somewhere";
        const auto picture = strategy::step_picture(e);
        EXPECT_FALSE(picture.caption.empty() && picture.note.empty());
    }
    EXPECT_EQ(strategy::strategy_names().front(), "single");
    EXPECT_TRUE(strategy::is_baseline("single"));
    EXPECT_FALSE(strategy::is_baseline("ddp"));
}

// The file's options of every strategy, at their defaults and at other values, survive
// to_json and parse_experiment; validate finds nothing wrong with them but what the strategy's
// own check says of this model (tensor_parallel has no attention to split in an MLP).
TEST(Registry, OptionsRoundTripThroughTheFile) {
    for (const auto& d : strategy::registry()) {
        SCOPED_TRACE(d.name);
        config::Experiment e = run::parse_experiment(spirals({{"type", d.name}}, 2));
        const config::StrategyConfig defaults = strategy::default_config(d.name);
        EXPECT_EQ(e.strategy.options, defaults.options);
        for (const auto& o : d.options) {
            switch (o.kind) {
                case config::OptionKind::boolean: e.strategy.options[o.key] = !std::get<bool>(o.fallback); break;
                case config::OptionKind::integer: e.strategy.options[o.key] = static_cast<int64_t>(o.min); break;
                case config::OptionKind::number: e.strategy.options[o.key] = 0.5; break;
                case config::OptionKind::choice: e.strategy.options[o.key] = o.choices.back(); break;
                case config::OptionKind::index_list: e.strategy.options[o.key] = std::vector<int64_t>{2}; break;
            }
        }
        const config::Experiment back = run::parse_experiment(run::to_json(e));
        EXPECT_EQ(back.strategy.type, d.name);
        EXPECT_EQ(back.strategy.options, e.strategy.options);
        std::string own_issue;
        if (d.check_options) {
            try {
                d.check_options(back);
            } catch (const ConfigError& err) {
                own_issue = err.path();
            }
        }
        const auto issues = run::validate(back);
        if (own_issue.empty()) EXPECT_TRUE(issues.empty()) << issues.front().text();
        else EXPECT_TRUE(issues.size() == 1 && issues.front().path == own_issue) << issues.front().text();
    }
}

TEST(Registry, OptionReadsTheFileElseTheDefault) {
    config::StrategyConfig s;
    s.type = "ddp";
    EXPECT_EQ(strategy::option<double>(s, "bucket_mb"), 25.0);
    s.options["bucket_mb"] = 0.25;
    EXPECT_EQ(strategy::option<double>(s, "bucket_mb"), 0.25);
    EXPECT_THROW(strategy::option<int64_t>(s, "bucket_mb"), Error);   // another type
    EXPECT_THROW(strategy::option<int64_t>(s, "stage"), Error);       // zero's, not ddp's
    EXPECT_THROW(strategy::default_config("ddq"), ConfigError);
}

// Errors carry the JSON path as data (the GUI places them by it, never by the text).
TEST(Registry, ErrorsCarryTheirPath) {
    struct Case {
        json strategy;
        int devices;
        std::string path, reason;
    };
    const Case cases[] = {
        {{{"type", "ddp"}, {"bucket_mb", 0}}, 2, "strategy.bucket_mb", "expected a positive number"},
        {{{"type", "ddp"}, {"stage", 2}}, 2, "strategy.stage", "not an option of the ddp strategy"},
        {{{"type", "zero"}, {"stage", 4}}, 2, "strategy.stage", "expected an integer from 1 to 3"},
        {{{"type", "pipeline"}, {"split", {2, 1}}}, 3, "strategy.split[1]", "expected indices in increasing order"},
        {{{"type", "pipeline"}, {"split", {1}}}, 3, "strategy.split", "expected 2 layer indices"},
        {{{"type", "model_parallel"}}, 4, "devices", "model_parallel places at least one top-level layer"},
        {{{"type", "pipeline"}, {"split", {1, -1}}}, 3, "strategy.split[1]", "expected a non-negative integer"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.strategy.dump());
        std::vector<config::Issue> issues;
        try {
            issues = run::validate(run::parse_experiment(spirals(c.strategy, c.devices)));
        } catch (const ConfigError& err) {
            issues = {{err.path(), err.reason()}};
            EXPECT_EQ(std::string(err.what()), err.path() + ": " + err.reason());
        }
        ASSERT_EQ(issues.size(), 1u);
        EXPECT_EQ(issues[0].path, c.path);
        EXPECT_EQ(issues[0].message.rfind(c.reason, 0), 0u) << issues[0].message;
    }
}

// docs/experiment-format.md holds the registry's table between its markers. To update the page
// after changing an option: PARALAB_UPDATE_DOCS=1 engine_registry_test.
TEST(Registry, FileFormatPageListsEveryOption) {
    const std::string path = std::string(PARALAB_SOURCE_DIR) + "/docs/experiment-format.md";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::stringstream text;
    text << in.rdbuf();
    std::string page = text.str();
    const std::string begin = "<!-- strategy options: generated from the registry -->\n";
    const std::string end = "<!-- end of strategy options -->";
    const size_t a = page.find(begin);
    size_t b = page.find(end);
    ASSERT_NE(a, std::string::npos) << "marker missing in " << path;
    ASSERT_NE(b, std::string::npos) << "marker missing in " << path;
    const std::string table = strategy::options_markdown();
    if (std::getenv("PARALAB_UPDATE_DOCS")) {
        page.replace(a + begin.size(), b - a - begin.size(), table);
        std::ofstream(path) << page;
        b = page.find(end);
    }
    EXPECT_EQ(page.substr(a + begin.size(), b - a - begin.size()), table)
        << "docs/experiment-format.md disagrees with the registry; run PARALAB_UPDATE_DOCS=1 engine_registry_test";
    for (const auto& d : strategy::registry()) EXPECT_NE(page.find("`" + d.name + "`"), std::string::npos) << d.name;
}

TEST(Registry, VariantNamesWhatTellsRunsApart) {
    auto label = [](const std::string& type, config::OptionValues options) {
        config::StrategyConfig s = strategy::default_config(type);
        for (auto& [key, value] : options) s.options[key] = value;
        return strategy::variant_label(s);
    };
    EXPECT_EQ(label("single", {}), "");
    EXPECT_EQ(label("zero", {}), "stage 1");
    EXPECT_EQ(label("zero", {{"stage", int64_t{2}}}), "stage 2");
    EXPECT_EQ(label("ddp", {{"bucket_mb", 0.25}}), "0.25 MiB buckets");
    EXPECT_EQ(label("ddp", {{"overlap", false}}), "25 MiB buckets · no overlap");
    EXPECT_EQ(label("pipeline", {{"schedule", std::string("1f1b")}, {"micro_batches", int64_t{8}}}),
              "1f1b · 8 micro-batches");
    // An option the form hides (staleness outside async mode) is not named.
    EXPECT_EQ(label("param_server", {{"staleness", int64_t{3}}}), "sync");
    EXPECT_EQ(label("param_server", {{"mode", std::string("async")}, {"staleness", int64_t{3}}}),
              "async · staleness 3");
    // Every part names an option its strategy has.
    for (const auto& d : strategy::registry())
        for (const auto& part : d.variant) EXPECT_NE(d.option(part.key), nullptr) << d.name << ": " << part.key;
}

// The hybrid mesh is drawn as its grid once dp · tp · pp is the device count.
TEST(Registry, HybridIsPicturedAsItsMesh) {
    config::Experiment e;
    e.devices = {"cpu:0", "cpu:1", "cpu:2", "cpu:3", "cpu:4", "cpu:5", "cpu:6", "cpu:7"};
    e.strategy = strategy::default_config("hybrid");
    e.strategy.options["dp"] = int64_t{2};
    e.strategy.options["tp"] = int64_t{2};
    e.strategy.options["pp"] = int64_t{2};
    const strategy::StepPicture p = strategy::step_picture(e);
    EXPECT_EQ(p.layout, strategy::StepPicture::Layout::mesh);
    EXPECT_EQ(p.mesh.dp, 2);
    EXPECT_EQ(p.mesh.tp, 2);
    EXPECT_EQ(p.mesh.pp, 2);
    e.strategy.options["pp"] = int64_t{1};  // 4 of the 8 devices: not a mesh yet, and said so
    const strategy::StepPicture q = strategy::step_picture(e);
    EXPECT_NE(q.layout, strategy::StepPicture::Layout::mesh);
    EXPECT_NE(q.note.find("must be the number of devices"), std::string::npos);
}

}  // namespace
}  // namespace paralab
