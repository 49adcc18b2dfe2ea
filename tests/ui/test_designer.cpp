// The model designer as a user drives it, offscreen: layers added from the palette get shapes,
// a layer that does not fit turns red and disables Start, every edit undoes and redoes, the
// property editor refuses what the file format refuses (with its message), a saved file opens
// to the same experiment, and a preset loads. Transformers: a transformer_block from the palette
// is one row with its exact parameter count and its parts folded under it, `repeat` is a field
// of every layer that round-trips through the file, and heads that do not divide the width turn
// that layer red.
#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QLabel>
#include <QMimeData>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QSplitter>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QUndoStack>
#include <QtTest>
#include <chrono>

#include "engine/nn/factory.h"
#include "ui/mainwindow/main_window.h"
#include "ui/panels/designer/layer_property_editor.h"
#include "ui/panels/designer/layer_views.h"
#include "ui/panels/designer/model_designer.h"

using paralab::ui::LayerPath;
using paralab::ui::LayerStackView;
using paralab::ui::MainWindow;
using paralab::ui::ModelDesigner;

class TestDesigner : public QObject {
    Q_OBJECT
private slots:
    void paletteListsEveryLayerType();
    void addingLayersUpdatesShapes_data();
    void addingLayersUpdatesShapes();
    void shapeErrorMarksTheRowAndDisablesStart();
    void undoRedoRestores();
    void moveDeleteWrap_data();
    void moveDeleteWrap();
    void propertyEditorRejectsWhatTheFileRejects();
    void propertyEditorAppliesAndUndoes();
    void saveThenOpenRoundTrips();
    void presetLoads();
    void dropFromThePaletteAppends();
    void shapeInferenceCoversPresetsAndALargeStack();
    void slowInferenceArrivesLaterAndOnlyIfCurrent();
    void inputFromTheDataSetFollowsItsSection();
    void transformerBlockFromThePalette();
    void repeatRoundTrips_data();
    void repeatRoundTrips();
    void wrongHeadsMarksThatLayer_data();
    void wrongHeadsMarksThatLayer();
    void gptCharExampleCountsEveryCopy();
    void llamaCharExampleShowsItsOptions();
    void moeCharExampleAndTheMlpTurnedIntoExperts();
    void screenshot();
};

static const char* kMlp = ":/examples/spirals-mlp.paralab.json";
static const char* kCnn = ":/examples/fashion-cnn.paralab.json";

static paralab::config::Experiment experimentFrom(const char* resource) {
    QFile file(resource);
    if (!file.open(QIODevice::ReadOnly)) qFatal("cannot open %s", resource);
    return paralab::run::parse_experiment(nlohmann::json::parse(file.readAll().toStdString()));
}

static QStringList types(const std::vector<paralab::nn::LayerSpec>& layers) {
    QStringList out;
    for (const auto& l : layers) {
        QString t = QString::fromStdString(l.type);
        if (l.type == "residual") t += "{" + types(l.layers).join(",") + "}";
        out << t;
    }
    return out;
}

static QString modelJson(const ModelDesigner& d) {
    return QString::fromStdString(paralab::run::to_json(d.experiment())["model"].dump());
}

void TestDesigner::paletteListsEveryLayerType() {
    MainWindow w;  // initialises the embedded examples
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    QCOMPARE(d.palette()->count(), static_cast<int>(paralab::nn::layer_types().size()));
    QVERIFY(d.presetBox()->count() >= 8 + 1);  // the examples, after "Load a preset…"
}

void TestDesigner::addingLayersUpdatesShapes_data() {
    QTest::addColumn<QStringList>("added");
    QTest::addColumn<QString>("lastOutput");
    QTest::addColumn<qint64>("lastParams");
    // spirals-mlp: linear 64, relu, linear 64, relu, linear 3.
    QTest::newRow("linear") << QStringList{"linear"} << "[10]" << qint64(3 * 10 + 10);
    QTest::newRow("linear, relu") << QStringList{"linear", "relu"} << "[10]" << qint64(0);
    QTest::newRow("layernorm") << QStringList{"layernorm"} << "[3]" << qint64(6);
    QTest::newRow("rmsnorm") << QStringList{"rmsnorm"} << "[3]" << qint64(3);  // a weight, no bias
    QTest::newRow("residual") << QStringList{"residual"} << "[3]" << qint64(0);
}

void TestDesigner::addingLayersUpdatesShapes() {
    QFETCH(QStringList, added);
    QFETCH(QString, lastOutput);
    QFETCH(qint64, lastParams);
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(experimentFrom(kMlp));
    const int before = d.stackView()->topLevelItemCount();
    QSignalSpy edited(&d, &ModelDesigner::modelEdited);
    for (const QString& type : added) {
        d.selectLayer({d.stackView()->topLevelItemCount() - 1});
        // As a double-click in the palette does: after the selected layer.
        emit d.palette()->itemActivated(d.palette()->findItems(type, Qt::MatchExactly).front());
    }
    QCOMPARE(edited.count(), added.size());
    QVERIFY(d.isValid());
    QCOMPARE(d.stackView()->topLevelItemCount(), before + added.size());
    auto* last = d.stackView()->topLevelItem(d.stackView()->topLevelItemCount() - 1);
    QCOMPARE(last->text(LayerStackView::OutputColumn), lastOutput);
    QCOMPARE(last->text(LayerStackView::ParamsColumn), QLocale().toString(lastParams));
    QVERIFY(!last->text(LayerStackView::MemoryColumn).isEmpty());
    // The new layer is selected, and the experiment handed out carries it.
    QCOMPARE(d.selectedPath(), LayerPath{d.stackView()->topLevelItemCount() - 1});
    const auto e = edited.last().at(0).value<paralab::config::Experiment>();
    QCOMPARE(static_cast<int>(e.layers.size()), before + added.size());
    QCOMPARE(e.name, experimentFrom(kMlp).name);
}

void TestDesigner::shapeErrorMarksTheRowAndDisablesStart() {
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(w.openExperiment(kMlp, false), QString());
    auto* start = w.findChild<QAction*>("startAction");
    QVERIFY(start->isEnabled());
    ModelDesigner* d = w.designer();
    QSignalSpy validity(d, &ModelDesigner::validityChanged);
    // conv2d on the flat [2] input of an MLP.
    QVERIFY(d->addLayer("conv2d", {}, 1));
    QVERIFY(!d->isValid());
    QCOMPARE(validity.count(), 1);
    QCOMPARE(validity.at(0).at(0).toBool(), false);
    const QString message = validity.at(0).at(1).toString();
    QVERIFY2(message.startsWith("model.layers[1] (conv2d)"), qPrintable(message));
    auto* row = d->stackView()->topLevelItem(1);
    QCOMPARE(row->foreground(0).color(), QColor(0xc6, 0x28, 0x28));
    QCOMPARE(row->toolTip(0), message);
    QCOMPARE(row->text(LayerStackView::OutputColumn), QString("shape error"));
    // The layer above still has its shape; the one below has none.
    QCOMPARE(d->stackView()->topLevelItem(0)->text(LayerStackView::OutputColumn), QString("[64]"));
    QCOMPARE(d->stackView()->topLevelItem(2)->text(LayerStackView::OutputColumn), QString("—"));
    QVERIFY(!start->isEnabled());
    d->undoAction()->trigger();
    QVERIFY(d->isValid());
    QCOMPARE(validity.last().at(0).toBool(), true);
    QVERIFY(start->isEnabled());
    QCOMPARE(d->stackView()->topLevelItem(1)->foreground(0).color(),
             d->stackView()->palette().text().color());
}

void TestDesigner::undoRedoRestores() {
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(experimentFrom(kCnn));
    const QString original = modelJson(d);
    QVERIFY(d.addLayer("dropout", {}, 3));
    QCOMPARE(d.setLayerOption({0}, "out_channels", "8"), QString());
    QVERIFY(d.wrapInResidual({4}));
    QVERIFY(d.moveLayerBy({1}, +1));
    QVERIFY(d.removeLayer({2}));
    QCOMPARE(d.setInputText("1, 32, 32"), QString());
    QCOMPARE(d.setLoss("mse"), QString());
    const QString edited = modelJson(d);
    QCOMPARE(d.undoStack()->count(), 7);
    for (int i = 0; i < 7; ++i) d.undoAction()->trigger();
    QCOMPARE(modelJson(d), original);
    for (int i = 0; i < 7; ++i) d.redoAction()->trigger();
    QCOMPARE(modelJson(d), edited);
    QCOMPARE(d.stackView()->topLevelItem(0)->text(0), QString("conv2d  8 ch, 3×3, pad 1"));
}

void TestDesigner::moveDeleteWrap_data() {
    QTest::addColumn<QString>("op");
    QTest::addColumn<QStringList>("expected");
    // spirals-mlp: linear, relu, linear, relu, linear
    QTest::newRow("up") << "up 1" << QStringList{"relu", "linear", "linear", "relu", "linear"};
    QTest::newRow("down") << "down 0" << QStringList{"relu", "linear", "linear", "relu", "linear"};
    QTest::newRow("down the last: no")
        << "down 4" << QStringList{"linear", "relu", "linear", "relu", "linear"};
    QTest::newRow("delete") << "delete 1" << QStringList{"linear", "linear", "relu", "linear"};
    QTest::newRow("wrap") << "wrap 1"
                          << QStringList{"linear", "residual{relu}", "linear", "relu", "linear"};
    QTest::newRow("drag into a block")
        << "wrap 1; move 3 into 1"
        << QStringList{"linear", "residual{relu,relu}", "linear", "linear"};
    QTest::newRow("drag to the end")
        << "move 0 to 5" << QStringList{"relu", "linear", "relu", "linear", "linear"};
}

void TestDesigner::moveDeleteWrap() {
    QFETCH(QString, op);
    QFETCH(QStringList, expected);
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(experimentFrom(kMlp));
    for (const QString& step : op.split("; ")) {
        const QStringList w = step.split(' ');
        const int i = w[1].toInt();
        d.selectLayer({i});
        if (w[0] == "up") d.findChild<QPushButton*>("moveUpButton")->click();
        if (w[0] == "down") d.findChild<QPushButton*>("moveDownButton")->click();
        if (w[0] == "delete") d.findChild<QPushButton*>("deleteButton")->click();
        if (w[0] == "wrap") d.findChild<QPushButton*>("wrapButton")->click();
        if (w[0] == "move" && w.value(2) == "into")
            emit d.stackView()->moveRequested({i}, {w.value(3).toInt()}, 1);
        if (w[0] == "move" && w.value(2) == "to")
            emit d.stackView()->moveRequested({i}, {}, w.value(3).toInt());
    }
    QCOMPARE(types(d.model().layers), expected);
    // The tree mirrors the model.
    QCOMPARE(d.stackView()->topLevelItemCount(), expected.size());
}

void TestDesigner::propertyEditorRejectsWhatTheFileRejects() {
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(experimentFrom(kMlp));
    const QString before = modelJson(d);
    d.selectLayer({2});  // linear out 64
    auto* out = d.propertyEditor()->findChild<QSpinBox*>("option_out");
    QVERIFY(out);
    out->setValue(-4);
    QCOMPARE(d.propertyEditor()->errorText(),
             QString("model.layers[2].out: expected a positive integer, got -4"));
    QCOMPARE(modelJson(d), before);
    QCOMPARE(d.undoStack()->count(), 0);
    // Dropout's p must be in [0, 1); a word is not a number.
    QCOMPARE(d.setLayerOption({1}, "p", "0.5").isEmpty(), false);  // relu has no p
    QVERIFY(d.addLayer("dropout", {}, 1));
    QCOMPARE(d.setLayerOption({1}, "p", "1"),
             QString("model.layers[1].p: expected a number in [0, 1), got 1.0"));
    QVERIFY(
        d.setLayerOption({1}, "p", "\"half\"").startsWith("model.layers[1].p: expected a number"));
}

void TestDesigner::propertyEditorAppliesAndUndoes() {
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(experimentFrom(kMlp));
    d.selectLayer({0});
    auto* out = d.propertyEditor()->findChild<QSpinBox*>("option_out");
    out->setValue(48);
    QCOMPARE(d.propertyEditor()->errorText(), QString());
    QCOMPARE(d.model().layers[0].out, 48);
    QCOMPARE(d.stackView()->topLevelItem(0)->text(LayerStackView::OutputColumn), QString("[48]"));
    QCOMPARE(d.selectedPath(), LayerPath{0});
    // Three more arrow steps on the same option: still one undo step.
    for (int i = 0; i < 3; ++i) d.propertyEditor()->findChild<QSpinBox*>("option_out")->stepUp();
    QCOMPARE(d.model().layers[0].out, 51);
    QCOMPARE(d.undoStack()->count(), 1);
    d.undoAction()->trigger();
    QCOMPARE(d.model().layers[0].out, 64);
    QCOMPARE(d.propertyEditor()->findChild<QSpinBox*>("option_out")->value(), 64);
}

void TestDesigner::saveThenOpenRoundTrips() {
    QTemporaryDir dir;
    const QString path = dir.filePath("edited.paralab.json");
    nlohmann::json saved;
    {
        MainWindow w;
        w.designer()->setSynchronousBudget(60000);
        QCOMPARE(w.openExperiment(kCnn, false), QString());
        QVERIFY(w.designer()->addLayer("dropout", {}, 9));
        QCOMPARE(w.designer()->setLayerOption({10}, "p", "0.25"), QString());
        // The window holds the edited experiment: Start would run it.
        QCOMPARE(w.experiment()->layers.size(), size_t(14));
        QCOMPARE(w.saveExperiment(path, false), QString());
        saved = paralab::run::to_json(*w.experiment());
        QCOMPARE(w.recentFiles().value(0), path);
    }
    QFile file(path);
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QByteArray bytes = file.readAll();
    QCOMPARE(bytes, QByteArray::fromStdString(saved.dump(2) + "\n"));

    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(w.openExperiment(path, false), QString());
    QCOMPARE(paralab::run::to_json(*w.experiment()), saved);
    QCOMPARE(paralab::run::to_json(w.designer()->experiment()), saved);
    // Saved again, byte for byte the same file.
    QCOMPARE(w.saveExperiment(path, false), QString());
    QVERIFY(file.seek(0));
    QFile again(path);
    QVERIFY(again.open(QIODevice::ReadOnly));
    QCOMPARE(again.readAll(), bytes);
}

void TestDesigner::presetLoads() {
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(w.openExperiment(kMlp, false), QString());
    ModelDesigner* d = w.designer();
    QSignalSpy requested(d, &ModelDesigner::presetRequested);
    const int index = d->presetBox()->findText("resnet-small");
    QVERIFY(index > 0);
    emit d->presetBox()->activated(index);
    QCOMPARE(requested.count(), 1);
    QCOMPARE(requested.at(0).at(0).toString(), QString(":/examples/resnet-small.paralab.json"));
    QCOMPARE(QString::fromStdString(w.experiment()->name), QString("resnet-small"));
    QCOMPARE(types(d->model().layers).size(), 9);
    QVERIFY(d->isValid());
    QCOMPARE(d->stackView()->topLevelItem(3)->childCount(), 5);  // the first residual block's body
    QCOMPARE(d->undoStack()->count(), 0);
}

void TestDesigner::dropFromThePaletteAppends() {
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(experimentFrom(kMlp));
    d.resize(800, 600);
    d.show();
    QVERIFY(QTest::qWaitForWindowExposed(&d));
    QMimeData mime;
    mime.setData(paralab::ui::kLayerTypeMime, "dropout");
    // Below the last row: onto the empty part of the stack.
    const QPoint below(10, d.stackView()->viewport()->height() - 5);
    QDragEnterEvent enter(below, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(d.stackView()->viewport(), &enter);
    QVERIFY(enter.isAccepted());
    QDragMoveEvent move(below, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(d.stackView()->viewport(), &move);
    QVERIFY(move.isAccepted());
    QDropEvent drop(below, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(d.stackView()->viewport(), &drop);
    QCOMPARE(types(d.model().layers),
             (QStringList{"linear", "relu", "linear", "relu", "linear", "dropout"}));
    QCOMPARE(d.undoStack()->count(), 1);
}

// The designer infers shapes after every edit (on a worker, waited for up to a budget:
// model_designer.h). Inference must hold for the presets and for a large convolution stack
// without computing anything; how long it takes is printed, not asserted (speed belongs to
// benchmarks, not tests).
void TestDesigner::shapeInferenceCoversPresetsAndALargeStack() {
    using Clock = std::chrono::steady_clock;
    auto infer = [](const paralab::ui::DesignedModel& m, const paralab::Shape& input,
                    const char* what) {
        const auto t0 = Clock::now();
        auto report = paralab::ui::inferShapes(m, input);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        qInfo("%s: %.2f ms (cold)", what, ms);
        if (!report.ok) qWarning() << report.message;
        return report;
    };
    for (const char* preset : {kCnn, ":/examples/resnet-small.paralab.json"}) {
        const auto e = experimentFrom(preset);
        const auto report = infer({e.layers, e.input, e.loss}, *e.input, preset);
        QVERIFY2(report.ok, preset);
        QVERIFY2(report.parameters > 0 && report.flops > 0, preset);
        QCOMPARE(report.output, (paralab::Shape{10}));
    }
    // 3x224x224 through eight 256-channel 3x3 convolutions (pad 1): ~4.1 M parameters.
    paralab::ui::DesignedModel big;
    for (int i = 0; i < 8; ++i) {
        auto conv = paralab::ui::defaultLayer("conv2d");
        conv.out_channels = 256;
        big.layers.push_back(conv);
        big.layers.push_back(paralab::ui::defaultLayer("relu"));
    }
    big.layers.push_back(paralab::ui::defaultLayer("global_avgpool"));
    big.layers.push_back(paralab::ui::defaultLayer("linear"));
    const auto report = infer(big, paralab::Shape{3, 224, 224}, "8 x conv2d 256 on 3x224x224");
    QVERIFY(report.ok);
    const int64_t first = 3 * 256 * 9 + 256, other = 256 * 256 * 9 + 256, head = 256 * 10 + 10;
    QCOMPARE(report.parameters, first + 7 * other + head);
    QCOMPARE(report.output, (paralab::Shape{10}));
    QCOMPARE(report.rows.front().second.output, (paralab::Shape{256, 224, 224}));
}

void TestDesigner::slowInferenceArrivesLaterAndOnlyIfCurrent() {
    ModelDesigner d;
    d.setSynchronousBudget(0);  // every inference goes past the budget (or, done already, not)
    QSignalSpy validity(&d, &ModelDesigner::validityChanged);
    d.setExperiment(experimentFrom(kCnn));
    QTRY_VERIFY(!d.shapesPending());
    QCOMPARE(validity.count(), 1);  // the experiment's first verdict, when its shapes arrived
    QVERIFY(d.isValid());
    // Two edits in a row: the first one's result is stale by the time it arrives.
    QCOMPARE(d.setLayerOption({10}, "out", "100"), QString());
    QVERIFY(d.shapesPending() || d.isValid());
    QCOMPARE(d.setLayerOption({12}, "out", "7"), QString());
    QTRY_VERIFY(!d.shapesPending());
    QCOMPARE(d.stackView()->topLevelItem(10)->text(LayerStackView::OutputColumn), QString("[100]"));
    QCOMPARE(d.stackView()->topLevelItem(12)->text(LayerStackView::OutputColumn), QString("[7]"));
    QCOMPARE(d.shapeReport().output, paralab::Shape({7}));
}

void TestDesigner::inputFromTheDataSetFollowsItsSection() {
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    auto e = experimentFrom(kMlp);  // spirals: 2 features
    d.setExperiment(e);
    QCOMPARE(d.setInputText(""), QString());  // from the data set
    QVERIFY(d.isValid());
    QCOMPARE(d.stackView()->topLevelItem(0)->text(LayerStackView::OutputColumn), QString("[64]"));
    // The data panel switches to 5-feature blobs: the designer keeps its model and history.
    e.data.dataset = "blobs";
    e.data.features = 5;
    e.data.classes = 3;
    d.updateContext(e);
    QCOMPARE(d.undoStack()->count(), 1);
    QVERIFY(d.isValid());
    QVERIFY2(d.shapeReport().rows.size() == 5, "all five layers inferred");
    QCOMPARE(d.shapeReport().rows[0].second.parameters, qint64(5 * 64 + 64));
    QCOMPARE(d.experiment().data.dataset, std::string("blobs"));
    QVERIFY(!d.experiment().input);
}

// A character-level model on [16] token ids, as gpt-char but small: embedding 256 -> 32,
// position_embedding, then `middle`, then layernorm and linear 256.
static paralab::config::Experiment textExperiment(
    const nlohmann::json& middle = nlohmann::json::array()) {
    nlohmann::json layers = nlohmann::json::array();
    layers.push_back({{"type", "embedding"}, {"vocab", 256}, {"dim", 32}});
    layers.push_back({{"type", "position_embedding"}});
    for (const auto& l : middle) layers.push_back(l);
    layers.push_back({{"type", "layernorm"}});
    layers.push_back({{"type", "linear"}, {"out", 256}});
    nlohmann::json j = {{"paralab", 1},
                        {"name", "tiny-text"},
                        {"data", {{"dataset", "text"}, {"seq_len", 16}, {"batch_size", 4}}},
                        {"model", {{"input", {16}}, {"layers", layers}, {"loss", "cross_entropy"}}},
                        {"devices", {"cpu:0"}},
                        {"strategy", {{"type", "single"}}},
                        {"optimizer", {{"type", "adamw"}, {"lr", 0.001}}},
                        {"train", {{"epochs", 1}, {"max_steps", 4}}}};
    return paralab::run::parse_experiment(j);
}

// docs/experiment-format.md: 4D + (4D^2 + 4D) + (2 D ffn + ffn + D).
static qint64 blockParameters(qint64 d, qint64 ffn) {
    return 4 * d + (4 * d * d + 4 * d) + (2 * d * ffn + ffn + d);
}

void TestDesigner::transformerBlockFromThePalette() {
    ModelDesigner d;
    d.setSynchronousBudget(60000);
    d.setExperiment(textExperiment());
    QVERIFY2(d.isValid(), qPrintable(d.validationMessage()));
    const qint64 before = d.shapeReport().parameters;
    // As a person does: select position_embedding, double-click transformer_block in the palette.
    d.selectLayer({1});
    emit d.palette()->itemActivated(
        d.palette()->findItems("transformer_block", Qt::MatchExactly).front());
    QVERIFY2(d.isValid(), qPrintable(d.validationMessage()));
    QCOMPARE(types(d.model().layers), (QStringList{"embedding", "position_embedding",
                                                   "transformer_block", "layernorm", "linear"}));
    const auto& block = d.model().layers[2];
    QCOMPARE(block.heads, 4);
    QCOMPARE(block.ffn, 512);
    QCOMPARE(block.causal, true);
    QCOMPARE(block.dropout, 0.0);
    QCOMPARE(block.repeat, 1);
    QCOMPARE(
        QString::fromStdString(paralab::run::to_json(d.experiment())["model"]["layers"][2].dump()),
        QString(R"({"causal":true,"dropout":0.0,"ffn":512,"heads":4,"type":"transformer_block"})"));
    QCOMPARE(d.selectedPath(), LayerPath{2});

    // One row, the exact count, its parts folded under it.
    const qint64 params = blockParameters(32, 512);
    QCOMPARE(d.shapeReport().parameters, before + params);
    auto* row = d.stackView()->topLevelItem(2);
    QCOMPARE(row->text(LayerStackView::LayerColumn),
             QString("transformer_block  4 heads, ffn 512"));
    QCOMPARE(row->text(LayerStackView::OutputColumn), QString("[16, 32]"));
    QCOMPARE(row->text(LayerStackView::ParamsColumn), QLocale().toString(params));
    QVERIFY(!row->isExpanded());
    QStringList parts;
    qint64 sum = 0;
    for (int i = 0; i < row->childCount(); ++i) {
        auto* part = row->child(i);
        parts << part->text(LayerStackView::LayerColumn);
        sum += QLocale().toLongLong(part->text(LayerStackView::ParamsColumn));
        QVERIFY(!(part->flags() &
                  (Qt::ItemIsSelectable | Qt::ItemIsDragEnabled | Qt::ItemIsDropEnabled)));
    }
    QCOMPARE(parts, (QStringList{"layernorm", "attention  4 heads, causal", "layernorm",
                                 "linear  out 512", "gelu", "linear  out 32"}));
    QCOMPARE(sum, params);
    QCOMPARE(row->child(3)->text(LayerStackView::OutputColumn), QString("[16, 512]"));
    // Attention's memory counts its [4, 16, 16] probabilities, not only its [16, 32] output.
    const auto& info = d.shapeReport().rows[2].second;
    QCOMPARE(info.parts.size(), size_t(6));
    QVERIFY(info.parts[1].activationBytes > (4 * 16 * 16 + 16 * 32) * 4);
    QVERIFY(!row->child(1)->text(LayerStackView::MemoryColumn).isEmpty());

    // Unfolded, it stays so across an edit; a part is not a layer to edit.
    row->setExpanded(true);
    d.stackView()->setCurrentItem(row->child(1));
    QCOMPARE(d.selectedPath(), LayerPath{2});
    QCOMPARE(d.setLayerOption({2}, "ffn", "64"), QString());
    QVERIFY(d.stackView()->topLevelItem(2)->isExpanded());
    QCOMPARE(d.stackView()->topLevelItem(2)->text(LayerStackView::ParamsColumn),
             QLocale().toString(blockParameters(32, 64)));

    // The property editor has the block's options.
    d.selectLayer({2});
    for (const char* key :
         {"option_heads", "option_ffn", "option_causal", "option_dropout", "option_repeat"})
        QVERIFY2(d.propertyEditor()->findChild<QWidget*>(key), key);
    d.propertyEditor()->findChild<QCheckBox*>("option_causal")->setChecked(false);
    QCOMPARE(d.model().layers[2].causal, false);
    QCOMPARE(d.stackView()->topLevelItem(2)->text(0),
             QString("transformer_block  4 heads, ffn 64, not causal"));
    // attention and position_embedding from the palette too.
    QVERIFY(d.addLayer("attention", {}, 3));
    QCOMPARE(d.model().layers[3].heads, 4);
    QCOMPARE(d.stackView()->topLevelItem(3)->text(LayerStackView::ParamsColumn),
             QLocale().toString(qint64(4 * 32 * 32 + 4 * 32)));
    QVERIFY(d.isValid());
}

void TestDesigner::repeatRoundTrips_data() {
    QTest::addColumn<int>("layer");
    QTest::addColumn<QString>("rowText");
    QTest::addColumn<qint64>("params");
    // textExperiment with a transformer_block (D 32, ffn 128) at 2: the block, and layernorm after
    // it.
    QTest::newRow("transformer_block")
        << 2 << "transformer_block ×3  4 heads, ffn 128" << 3 * blockParameters(32, 128);
    QTest::newRow("layernorm") << 3 << "layernorm ×3" << qint64(3 * 2 * 32);
}

void TestDesigner::repeatRoundTrips() {
    QFETCH(int, layer);
    QFETCH(QString, rowText);
    QFETCH(qint64, params);
    QTemporaryDir dir;
    const QString path = dir.filePath("repeat.paralab.json");
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    w.setExperiment(textExperiment(
        nlohmann::json::array({{{"type", "transformer_block"}, {"heads", 4}, {"ffn", 128}}})));
    ModelDesigner* d = w.designer();
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    d->selectLayer({layer});
    auto* repeat = d->propertyEditor()->findChild<QSpinBox*>("option_repeat");
    QVERIFY(repeat);
    QCOMPARE(repeat->value(), 1);
    repeat->setValue(3);
    QCOMPARE(d->propertyEditor()->errorText(), QString());
    QCOMPARE(d->model().layers[layer].repeat, 3);
    QCOMPARE(d->stackView()->topLevelItem(layer)->text(LayerStackView::LayerColumn), rowText);
    QCOMPARE(d->stackView()->topLevelItem(layer)->text(LayerStackView::ParamsColumn),
             QLocale().toString(params));
    QCOMPARE(w.experiment()->layers[layer].repeat, 3);
    // Through the file and back: "repeat": 3 in it, and the designer shows it again.
    QCOMPARE(w.saveExperiment(path, false), QString());
    MainWindow again;
    again.designer()->setSynchronousBudget(60000);
    QCOMPARE(again.openExperiment(path, false), QString());
    QCOMPARE(paralab::run::load_experiment(path.toStdString()).layers[layer].repeat, 3);
    QCOMPARE(again.designer()->model().layers[layer].repeat, 3);
    QCOMPARE(again.designer()->stackView()->topLevelItem(layer)->text(LayerStackView::LayerColumn),
             rowText);
    again.designer()->selectLayer({layer});
    QCOMPARE(again.designer()->propertyEditor()->findChild<QSpinBox*>("option_repeat")->value(), 3);
    // Less than one copy is refused with the file's message; undo gives one copy, and the file
    // says nothing of repeat then.
    QVERIFY(d->setLayerOption({layer}, "repeat", "0")
                .startsWith(
                    QString("model.layers[%1].repeat: expected a positive integer").arg(layer)));
    d->undoAction()->trigger();
    QCOMPARE(d->model().layers[layer].repeat, 1);
    QVERIFY(!paralab::run::to_json(d->experiment())["model"]["layers"][layer].contains("repeat"));
    QCOMPARE(d->stackView()->topLevelItem(layer)->text(LayerStackView::LayerColumn),
             QString(rowText).remove(" ×3"));
}

void TestDesigner::wrongHeadsMarksThatLayer_data() {
    QTest::addColumn<QString>("type");
    QTest::addColumn<int>("repeat");
    QTest::newRow("transformer_block") << "transformer_block" << 1;
    QTest::newRow("transformer_block ×4") << "transformer_block" << 4;
    QTest::newRow("attention") << "attention" << 1;
}

void TestDesigner::wrongHeadsMarksThatLayer() {
    QFETCH(QString, type);
    QFETCH(int, repeat);
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    nlohmann::json layer = {{"type", type.toStdString()}, {"heads", 4}, {"repeat", repeat}};
    if (type == "transformer_block") layer["ffn"] = 64;
    w.setExperiment(textExperiment(nlohmann::json::array({layer})));
    ModelDesigner* d = w.designer();
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    auto* start = w.findChild<QAction*>("startAction");
    QVERIFY(start->isEnabled());
    QSignalSpy validity(d, &ModelDesigner::validityChanged);
    d->selectLayer({2});
    d->propertyEditor()->findChild<QSpinBox*>("option_heads")->setValue(5);  // 32 is not 5 heads
    QCOMPARE(d->propertyEditor()->errorText(), QString());  // the file takes it; the shapes do not
    QVERIFY(!d->isValid());
    QCOMPARE(validity.count(), 1);
    const QString message = validity.at(0).at(1).toString();
    QVERIFY2(message.startsWith(QString("model.layers[2] (%1").arg(type)), qPrintable(message));
    QVERIFY2(message.contains("model.layers[2].heads = 5 does not divide the width D = 32"),
             qPrintable(message));
    QCOMPARE(d->shapeReport().errorPath, LayerPath{2});
    auto* row = d->stackView()->topLevelItem(2);
    QCOMPARE(row->foreground(0).color(), QColor(0xc6, 0x28, 0x28));
    QCOMPARE(row->toolTip(0), message);
    QCOMPARE(row->text(LayerStackView::OutputColumn), QString("shape error"));
    QCOMPARE(d->stackView()->topLevelItem(1)->text(LayerStackView::OutputColumn),
             QString("[16, 32]"));
    QCOMPARE(d->findChild<QLabel*>("shapeError")->text(), message);
    QVERIFY(!start->isEnabled());
    // Back to 4 heads: valid again.
    d->findChild<QSpinBox*>("option_heads")->setValue(4);
    QVERIFY(d->isValid());
    QVERIFY(start->isEnabled());
}

// resources/examples/gpt-char.paralab.json: four transformer_blocks in one row, every copy counted.
void TestDesigner::gptCharExampleCountsEveryCopy() {
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(
        w.openExperiment(PARALAB_SOURCE_DIR "/resources/examples/gpt-char.paralab.json", false),
        QString());
    ModelDesigner* d = w.designer();
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    QCOMPARE(d->stackView()->topLevelItemCount(), 5);
    auto* blocks = d->stackView()->topLevelItem(2);
    QCOMPARE(blocks->text(LayerStackView::LayerColumn),
             QString("transformer_block ×4  4 heads, ffn 512"));
    const qint64 block = blockParameters(128, 512);
    QCOMPARE(blocks->text(LayerStackView::ParamsColumn), QLocale().toString(4 * block));
    QCOMPARE(blocks->childCount(), 6);
    QCOMPARE(blocks->child(1)->text(LayerStackView::LayerColumn),
             QString("attention ×4  4 heads, causal"));
    QCOMPARE(blocks->child(1)->text(LayerStackView::ParamsColumn),
             QLocale().toString(qint64(4 * (4 * 128 * 128 + 4 * 128))));
    const qint64 total = 256 * 128 + 64 * 128 + 4 * block + 2 * 128 + (128 * 256 + 256);
    QCOMPARE(d->shapeReport().parameters, total);
    QVERIFY(d->findChild<QLabel*>("modelTotals")->text().contains(QLocale().toString(total)));
}

// resources/examples/llama-char.paralab.json: the Llama block's options in its row, its parts
// (rmsnorm, grouped-query attention, rmsnorm, swiglu) unfolded, and the new options editable.
void TestDesigner::llamaCharExampleShowsItsOptions() {
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(
        w.openExperiment(PARALAB_SOURCE_DIR "/resources/examples/llama-char.paralab.json", false),
        QString());
    ModelDesigner* d = w.designer();
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    auto* blocks = d->stackView()->topLevelItem(1);
    QCOMPARE(blocks->text(LayerStackView::LayerColumn),
             QString("transformer_block ×4  8 heads (2 kv), ffn 384, rope, rmsnorm, swiglu, no bias"));
    QCOMPARE(blocks->childCount(), 4);
    QCOMPARE(blocks->child(0)->text(LayerStackView::LayerColumn), QString("rmsnorm ×4"));
    QCOMPARE(blocks->child(1)->text(LayerStackView::LayerColumn), QString("attention ×4  8 heads (2 kv), causal"));
    QCOMPARE(blocks->child(3)->text(LayerStackView::LayerColumn), QString("swiglu ×4  ffn 384"));
    QCOMPARE(d->shapeReport().parameters, qint64(820352));
    d->selectLayer({1});
    QCOMPARE(d->propertyEditor()->findChild<QSpinBox*>("option_kv_heads")->value(), 2);
    QCOMPARE(d->propertyEditor()->findChild<QComboBox*>("option_mlp")->currentText(), QString("swiglu"));
    QCOMPARE(d->propertyEditor()->findChild<QComboBox*>("option_norm")->currentText(), QString("rmsnorm"));
    QVERIFY(d->propertyEditor()->findChild<QWidget*>("option_rope_theta"));
    // 3 key/value heads do not divide 8: refused, the model unchanged.
    d->propertyEditor()->findChild<QSpinBox*>("option_kv_heads")->setValue(3);
    QVERIFY(d->propertyEditor()->errorText().contains("kv_heads"));
    QCOMPARE(d->shapeReport().parameters, qint64(820352));
    // Multi-query: one key/value head, 2 * 16 * 128 fewer qkv weights a block than with two.
    d->propertyEditor()->findChild<QSpinBox*>("option_kv_heads")->setValue(1);
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    QCOMPARE(d->shapeReport().parameters, qint64(820352 - 4 * 2 * 16 * 128));
}

// resources/examples/moe-char.paralab.json: the mixture's options in the block's row and its
// part; llama-char's SwiGLU turned into experts (the width carried over, 8 of them, 2 per token)
// and back, and a capacity typed in and cleared (null: dropless).
void TestDesigner::moeCharExampleAndTheMlpTurnedIntoExperts() {
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(w.openExperiment(PARALAB_SOURCE_DIR "/resources/examples/moe-char.paralab.json", false), QString());
    ModelDesigner* d = w.designer();
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    auto* blocks = d->stackView()->topLevelItem(1);
    QCOMPARE(blocks->text(LayerStackView::LayerColumn),
             QString("transformer_block ×2  4 heads (2 kv), rope, rmsnorm, moe (8 experts, top 2, ffn 96, 1 shared), no bias"));
    QVERIFY2(blocks->child(3)->text(LayerStackView::LayerColumn).startsWith("moe ×2  8 experts, top 2, ffn 96, 1 shared"),
             qPrintable(blocks->child(3)->text(LayerStackView::LayerColumn)));
    QCOMPARE(d->shapeReport().parameters, qint64(390464));
    d->selectLayer({1});
    QCOMPARE(d->propertyEditor()->findChild<QSpinBox*>("option_experts")->value(), 8);
    QVERIFY(!d->propertyEditor()->findChild<QSpinBox*>("option_ffn"));
    d->propertyEditor()->findChild<QSpinBox*>("option_top_k")->setValue(9);  // more than the experts
    QVERIFY(d->propertyEditor()->errorText().contains("top_k"));
    QCOMPARE(d->shapeReport().parameters, qint64(390464));

    QCOMPARE(w.openExperiment(PARALAB_SOURCE_DIR "/resources/examples/llama-char.paralab.json", false), QString());
    QCOMPARE(d->setLayerOption({1}, "mlp", "\"moe\""), QString());
    QVERIFY2(d->isValid(), qPrintable(d->validationMessage()));
    const paralab::nn::LayerSpec& moe = d->model().layers[1];
    QCOMPARE(moe.mlp, std::string("moe"));
    QCOMPARE(moe.experts, int64_t{8});
    QCOMPARE(moe.top_k, int64_t{2});
    QCOMPARE(moe.expert_ffn, int64_t{384});
    QCOMPARE(d->setLayerOption({1}, "capacity_factor", "1.25"), QString());
    QCOMPARE(d->model().layers[1].capacity_factor, 1.25);
    QCOMPARE(d->setLayerOption({1}, "capacity_factor", "null"), QString());
    QCOMPARE(d->model().layers[1].capacity_factor, 0.0);
    QCOMPARE(d->setLayerOption({1}, "mlp", "\"swiglu\""), QString());
    QCOMPARE(d->model().layers[1].ffn, int64_t{384});
    QCOMPARE(d->model().layers[1].experts, int64_t{0});
    QCOMPARE(d->shapeReport().parameters, qint64(820352));
}

// Not a check: the README's screenshots of the designer (fashion-cnn, its second conv2d selected;
// gpt-char, its transformer_block unfolded).
// Run under a display (xvfb-run -s "-screen 0 1600x1000x24" ui_designer_test screenshot
// -platform xcb) with PARALAB_SCREENSHOT_DIR set to the folder to write them into.
void TestDesigner::screenshot() {
    const QString dir = qEnvironmentVariable("PARALAB_SCREENSHOT_DIR");
    if (dir.isEmpty()) QSKIP("set PARALAB_SCREENSHOT_DIR to take the README's screenshot");
    MainWindow w;
    w.designer()->setSynchronousBudget(60000);
    QCOMPARE(w.openExperiment(kCnn, false), QString());
    w.resize(1600, 1000);
    w.move(0, 0);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    if (auto* tabs = w.findChild<QTabWidget*>("experimentTabs"))
        tabs->setCurrentWidget(w.designer());
    if (auto* split = qobject_cast<QSplitter*>(w.centralWidget())) split->setSizes({860, 740});
    w.designer()->selectLayer({4});
    QTest::qWait(300);
    QVERIFY(w.grab().save(QDir(dir).filePath("screenshot-designer.png")));
    // docs/designer-transformer.png: gpt-char, its transformer_block selected and unfolded.
    QCOMPARE(
        w.openExperiment(PARALAB_SOURCE_DIR "/resources/examples/gpt-char.paralab.json", false),
        QString());
    if (auto* split = qobject_cast<QSplitter*>(w.centralWidget())) split->setSizes({800, 800});
    w.designer()->selectLayer({2});
    w.designer()->stackView()->topLevelItem(2)->setExpanded(true);
    QTest::qWait(300);
    QVERIFY(
        w.grab(QRect(0, 0, 800, w.height())).save(QDir(dir).filePath("designer-transformer.png")));
}

static void useTemporaryStoreAndSettings() {
    static QTemporaryDir dir;
    qputenv("XDG_DATA_HOME", dir.path().toUtf8());
    qputenv("XDG_CONFIG_HOME", dir.path().toUtf8());
}
Q_CONSTRUCTOR_FUNCTION(useTemporaryStoreAndSettings)

QTEST_MAIN(TestDesigner)
#include "test_designer.moc"
