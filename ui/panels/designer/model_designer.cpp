#include "ui/panels/designer/model_designer.h"

#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QRegularExpression>
#include <QSet>
#include <QTimer>
#include <QToolButton>
#include <QUndoStack>
#include <QVBoxLayout>
#include <algorithm>
#include <chrono>
#include <future>
#include <map>

#include "engine/nn/factory.h"
#include "ui/panels/common/byte_units.h"
#include "ui/panels/designer/layer_property_editor.h"
#include "ui/panels/designer/layer_views.h"
#include "ui/panels/designer/model_edit_command.h"

namespace paralab::ui {

using nlohmann::json;

namespace {

const QColor kErrorText(0xc6, 0x28, 0x28);
const QColor kErrorBackground(0xff, 0xeb, 0xee);

QString siCount(double v, const QString& unit) {
    const char* prefixes[] = {"", "K", "M", "G", "T"};
    int i = 0;
    while (std::abs(v) >= 1000 && i < 4) v /= 1000, ++i;
    return QStringLiteral("%1 %2%3")
        .arg(v, 0, 'f', i == 0 ? 0 : (v < 10 ? 2 : 1))
        .arg(prefixes[i])
        .arg(unit);
}

QString shapeText(const Shape& s) {
    return QString::fromStdString(s.to_string());
}

// The JSON object of the layer at `path` inside an experiment's JSON.
json* layerJson(json& experiment, const LayerPath& path) {
    json* list = &experiment["model"]["layers"];
    json* layer = nullptr;
    for (int i : path) {
        if (layer) {  // into a residual body (at() and find(): nothing is created on the way)
            auto body = layer->find("layers");
            if (body == layer->end()) return nullptr;
            list = &*body;
        }
        if (!list->is_array() || i < 0 || i >= static_cast<int>(list->size())) return nullptr;
        layer = &(*list)[static_cast<size_t>(i)];
    }
    return layer;
}

}  // namespace

// The shape inference in flight: the current one, and those an edit made stale (kept until they
// finish, because a std::async future's destructor waits for its task).
struct ModelDesigner::InferenceJobs {
    std::future<ShapeReport> current;
    std::vector<std::future<ShapeReport>> stale;
};

ModelDesigner::ModelDesigner(QWidget* parent)
    : QWidget(parent),
      m_jobs(std::make_unique<InferenceJobs>()),
      m_poll(new QTimer(this)),
      m_undo(new QUndoStack(this)),
      m_presets(new QComboBox),
      m_palette(new LayerPalette),
      m_stack(new LayerStackView),
      m_properties(new LayerPropertyEditor),
      m_input(new QLineEdit),
      m_loss(new QComboBox),
      m_totals(new QLabel),
      m_error(new QLabel),
      m_up(new QPushButton(tr("Up"))),
      m_down(new QPushButton(tr("Down"))),
      m_delete(new QPushButton(tr("Delete"))),
      m_wrap(new QPushButton(tr("Wrap in residual"))),
      m_lockNote(new QLabel(tr("A run is training this model: it can be changed once the run ends."))) {
    m_poll->setInterval(20);
    connect(m_poll, &QTimer::timeout, this, &ModelDesigner::pollInference);
    m_undoAction = m_undo->createUndoAction(this, tr("&Undo"));
    m_undoAction->setShortcut(QKeySequence::Undo);
    m_undoAction->setObjectName(QStringLiteral("undoAction"));
    m_redoAction = m_undo->createRedoAction(this, tr("&Redo"));
    m_redoAction->setShortcut(QKeySequence::Redo);
    m_redoAction->setObjectName(QStringLiteral("redoAction"));

    // Header: presets, undo, redo.
    m_presets->setObjectName(QStringLiteral("presetBox"));
    m_presets->addItem(tr("Load a preset…"));
    for (const QString& name :
         QDir(QStringLiteral(":/examples")).entryList({QStringLiteral("*.paralab.json")}))
        m_presets->addItem(QString(name).remove(QStringLiteral(".paralab.json")),
                           QStringLiteral(":/examples/") + name);
    auto* undoButton = new QToolButton;
    undoButton->setDefaultAction(m_undoAction);
    auto* redoButton = new QToolButton;
    redoButton->setDefaultAction(m_redoAction);
    auto* header = new QHBoxLayout;
    header->addWidget(new QLabel(tr("Preset")));
    header->addWidget(m_presets);
    header->addStretch(1);
    header->addWidget(undoButton);
    header->addWidget(redoButton);

    // Palette | stack with its buttons.
    m_palette->setObjectName(QStringLiteral("layerPalette"));
    for (const auto& type : nn::layer_types()) m_palette->addItem(QString::fromStdString(type));
    // As wide as its longest name ("position_embedding"), no wider than it must be.
    m_palette->setFixedWidth(
        std::max(120, m_palette->sizeHintForColumn(0) + 2 * m_palette->frameWidth() + 8));
    m_stack->setObjectName(QStringLiteral("layerStack"));
    m_up->setObjectName(QStringLiteral("moveUpButton"));
    m_down->setObjectName(QStringLiteral("moveDownButton"));
    m_delete->setObjectName(QStringLiteral("deleteButton"));
    m_wrap->setObjectName(QStringLiteral("wrapButton"));
    // Two rows of two: one row of four would widen the tab past a projector's half screen.
    auto* buttons = new QGridLayout;
    buttons->addWidget(m_up, 0, 0);
    buttons->addWidget(m_down, 0, 1);
    buttons->addWidget(m_delete, 1, 0);
    buttons->addWidget(m_wrap, 1, 1);
    buttons->setColumnStretch(2, 1);
    auto* stackBox = new QWidget;
    auto* stackLayout = new QVBoxLayout(stackBox);
    stackLayout->setContentsMargins(0, 0, 0, 0);
    stackLayout->addWidget(m_stack, 1);
    stackLayout->addLayout(buttons);
    auto* paletteBox = new QVBoxLayout;
    paletteBox->addWidget(new QLabel(tr("Layer types")));
    paletteBox->addWidget(m_palette, 1);
    auto* stackTitle = new QLabel(tr("Layers (drop here; per example)"));
    stackLayout->insertWidget(0, stackTitle);
    auto* split = new QHBoxLayout;
    split->addLayout(paletteBox);
    split->addWidget(stackBox, 1);

    // The model's input and loss, then the selected layer's options.
    m_input->setObjectName(QStringLiteral("inputEdit"));
    m_input->setPlaceholderText(tr("from the data set"));
    m_loss->setObjectName(QStringLiteral("lossBox"));
    m_loss->addItems({QStringLiteral("cross_entropy"), QStringLiteral("mse")});
    auto* modelBox = new QGroupBox(tr("Model"));
    auto* modelForm = new QFormLayout(modelBox);
    m_inputError = new QLabel;
    m_inputError->setObjectName(QStringLiteral("model.input.error"));
    m_inputError->setWordWrap(true);
    m_inputError->setStyleSheet(QStringLiteral("color: #c62828;"));
    m_inputError->hide();
    auto* inputCell = new QWidget;
    auto* inputLayout = new QVBoxLayout(inputCell);
    inputLayout->setContentsMargins(0, 0, 0, 0);
    inputLayout->setSpacing(2);
    inputLayout->addWidget(m_input);
    inputLayout->addWidget(m_inputError);
    modelForm->addRow(tr("input"), inputCell);
    modelForm->addRow(tr("loss"), m_loss);
    auto* layerBox = new QGroupBox(tr("Layer"));
    auto* layerLayout = new QVBoxLayout(layerBox);
    layerLayout->addWidget(m_properties);
    // One above the other: side by side, the two forms would make the tab wider than a
    // projector's half screen.
    auto* editors = new QVBoxLayout;
    editors->addWidget(modelBox);
    editors->addWidget(layerBox);

    m_totals->setObjectName(QStringLiteral("modelTotals"));
    m_totals->setWordWrap(true);
    m_error->setObjectName(QStringLiteral("shapeError"));
    m_error->setWordWrap(true);
    m_error->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_error->setStyleSheet(QStringLiteral("color: #c62828;"));

    m_lockNote->setObjectName(QStringLiteral("modelLockNote"));
    m_lockNote->setWordWrap(true);
    m_lockNote->setStyleSheet(
        QStringLiteral("QLabel { background: #fff4d6; border: 1px solid #e8cf8a; padding: 4px; }"));
    m_lockNote->hide();

    auto* layout = new QVBoxLayout(this);
    layout->addWidget(m_lockNote);
    layout->addLayout(header);
    layout->addLayout(split, 1);
    layout->addWidget(m_totals);
    layout->addWidget(m_error);
    layout->addLayout(editors);

    auto* deleteShortcut = new QAction(this);
    deleteShortcut->setShortcut(QKeySequence::Delete);
    deleteShortcut->setShortcutContext(Qt::WidgetShortcut);
    m_stack->addAction(deleteShortcut);
    connect(deleteShortcut, &QAction::triggered, this, [this] { removeLayer(selectedPath()); });

    connect(m_presets, &QComboBox::activated, this, [this](int index) {
        const QString path = m_presets->itemData(index).toString();
        m_presets->setCurrentIndex(0);
        if (!path.isEmpty()) emit presetRequested(path);
    });
    connect(m_palette, &LayerPalette::layerTypeActivated, this, [this](const QString& type) {
        // After the selected layer, in its list; at the end when none is selected.
        const LayerPath at = selectedPath();
        if (at.isEmpty())
            addLayer(type);
        else
            addLayer(type, at.mid(0, at.size() - 1), at.back() + 1);
    });
    connect(m_stack, &LayerStackView::insertRequested, this,
            [this](const QString& type, const LayerPath& parent, int index) {
                addLayer(type, parent, index);
            });
    connect(m_stack, &LayerStackView::moveRequested, this, &ModelDesigner::moveLayer);
    connect(m_stack, &QTreeWidget::currentItemChanged, this, [this] {
        if (!m_applying) showSelection();
    });
    connect(m_up, &QPushButton::clicked, this, [this] { moveLayerBy(selectedPath(), -1); });
    connect(m_down, &QPushButton::clicked, this, [this] { moveLayerBy(selectedPath(), +1); });
    connect(m_delete, &QPushButton::clicked, this, [this] { removeLayer(selectedPath()); });
    connect(m_wrap, &QPushButton::clicked, this, [this] { wrapInResidual(selectedPath()); });
    connect(m_properties, &LayerPropertyEditor::optionEdited, this,
            [this](const QString& key, const QString& value) {
                m_properties->showError(setLayerOption(selectedPath(), key, value));
            });
    connect(m_input, &QLineEdit::editingFinished, this, [this] {
        showInputError(setInputText(m_input->text()));
    });
    connect(m_loss, &QComboBox::activated, this, [this] { setLoss(m_loss->currentText()); });

    // Until an experiment is given: a one-layer model on spirals, so that every edit validates.
    setExperiment(run::parse_experiment(json::parse(R"({"paralab": 1, "name": "untitled",
        "data": {"dataset": "spirals"}, "model": {"input": [2], "layers": [{"type": "linear", "out": 2}]}})")));
}

// Waits for inference still in flight (the futures' destructors): at most one model build.
ModelDesigner::~ModelDesigner() = default;

void ModelDesigner::showInputError(const QString& message) {
    m_inputError->setText(message);
    m_inputError->setVisible(!message.isEmpty());
    if (message == m_inputErrorText) return;
    m_inputErrorText = message;
    emit inputErrorChanged(message);
}

void ModelDesigner::setExperiment(const config::Experiment& e) {
    showInputError({});  // a new experiment's input, not the text refused before
    m_base = e;
    m_model = DesignedModel{e.layers, e.input, e.loss};
    m_dataInput.reset();
    m_dataInputError.clear();
    m_undo->clear();
    m_announceValidity = true;  // whatever it is: a new experiment's first verdict
    startInference({});
}

void ModelDesigner::updateContext(const config::Experiment& e) {
    const bool dataChanged = run::to_json(e)["data"] != run::to_json(m_base)["data"];
    m_base = e;
    if (!dataChanged) return;
    m_dataInput.reset();
    m_dataInputError.clear();
    startInference(selectedPath());  // the model's input comes from the data, or must match it
}

void ModelDesigner::readDataInput() {
    // Once per experiment (or data section), when first needed: for an IDX set this opens the file.
    config::Experiment probe = m_base;
    probe.input.reset();
    try {
        m_dataInput = run::model_input_shape(probe);
    } catch (const std::exception& err) {
        m_dataInputError = tr("model.input: cannot read the data set's example shape: %1")
                               .arg(QString::fromUtf8(err.what()));
    }
}

config::Experiment ModelDesigner::experiment() const {
    config::Experiment e = m_base;
    e.layers = m_model.layers;
    e.input = m_model.input;
    e.loss = m_model.loss;
    return e;
}

LayerPath ModelDesigner::selectedPath() const {
    return m_stack->currentItem() ? m_stack->pathOf(m_stack->currentItem()) : LayerPath{};
}

void ModelDesigner::selectLayer(const LayerPath& path) {
    m_stack->setCurrentItem(m_stack->itemAt(path));
}

// --- edits ------------------------------------------------------------------------------------

QString ModelDesigner::commit(const QString& text, DesignedModel next, const LayerPath& selectAfter,
                              const QString& mergeKey) {
    if (m_locked) return tr("The model cannot be changed while a run trains it.");
    // The file format's parser is the one judge of options: what it refuses, the designer refuses
    // with the same message (docs/experiment-format.md: the JSON path, what was expected, what was given).
    config::Experiment e = m_base;
    e.layers = next.layers;
    e.input = next.input;
    e.loss = next.loss;
    try {
        const config::Experiment parsed = run::parse_experiment(run::to_json(e));
        next = DesignedModel{parsed.layers, parsed.input, parsed.loss};
    } catch (const std::exception& err) {
        return QString::fromUtf8(err.what());
    }
    m_undo->push(new ModelEditCommand(
        text, m_model, selectedPath(), std::move(next), selectAfter,
        [this](const DesignedModel& m, const LayerPath& s) { apply(m, s); }, mergeKey));
    return {};
}

bool ModelDesigner::addLayer(const QString& type, const LayerPath& parent, int index) {
    if (std::find(nn::layer_types().begin(), nn::layer_types().end(), type.toStdString()) ==
        nn::layer_types().end())
        return false;
    DesignedModel next = m_model;
    std::vector<nn::LayerSpec>* list = &next.layers;
    if (!parent.isEmpty()) {
        nn::LayerSpec* block = layerAt(next.layers, parent);
        if (!block || block->type != "residual") return false;
        list = &block->layers;
    }
    if (index < 0 || index > static_cast<int>(list->size())) index = static_cast<int>(list->size());
    list->insert(list->begin() + index, defaultLayer(type.toStdString()));
    const QString message =
        commit(tr("Add %1").arg(type), std::move(next), LayerPath(parent) << index);
    m_properties->showError(message);
    return message.isEmpty();
}

bool ModelDesigner::removeLayer(const LayerPath& path) {
    DesignedModel next = m_model;
    auto* list = parentList(next.layers, path);
    if (!list || !layerAt(next.layers, path)) return false;
    const QString type = QString::fromStdString((*list)[static_cast<size_t>(path.back())].type);
    list->erase(list->begin() + path.back());
    LayerPath select = path;
    if (select.back() >= static_cast<int>(list->size())) --select.back();
    if (select.back() < 0) select.removeLast();
    const QString message = commit(tr("Delete %1").arg(type), std::move(next), select);
    m_properties->showError(message);
    return message.isEmpty();
}

bool ModelDesigner::moveLayer(const LayerPath& from, const LayerPath& parentIn, int index) {
    DesignedModel next = m_model;
    auto* fromList = parentList(next.layers, from);
    if (!fromList || !layerAt(next.layers, from)) return false;
    // A block cannot move into its own body.
    if (parentIn.size() >= from.size() && parentIn.mid(0, from.size()) == from) return false;
    LayerPath parent = parentIn;
    const LayerPath fromParent = from.mid(0, from.size() - 1);
    const int depth = static_cast<int>(fromParent.size());
    // Removing `from` shifts what follows it in its list: the destination list's path, or the
    // index in it when it is the same list.
    if (parent.size() > depth && parent.mid(0, depth) == fromParent && parent[depth] > from.back())
        --parent[depth];
    if (parent == fromParent && index > from.back()) --index;

    nn::LayerSpec moved = (*fromList)[static_cast<size_t>(from.back())];
    fromList->erase(fromList->begin() + from.back());
    std::vector<nn::LayerSpec>* toList = &next.layers;
    if (!parent.isEmpty()) {
        nn::LayerSpec* block = layerAt(next.layers, parent);
        if (!block || block->type != "residual") return false;
        toList = &block->layers;
    }
    if (index < 0 || index > static_cast<int>(toList->size())) return false;
    if (parent == fromParent && index == from.back()) return false;  // nowhere
    const QString text = tr("Move %1").arg(QString::fromStdString(moved.type));
    toList->insert(toList->begin() + index, std::move(moved));
    const QString message = commit(text, std::move(next), LayerPath(parent) << index);
    m_properties->showError(message);
    return message.isEmpty();
}

bool ModelDesigner::moveLayerBy(const LayerPath& path, int delta) {
    if (path.isEmpty() || delta == 0) return false;
    // moveLayer takes the index before removal: one down is two places on.
    return moveLayer(path, path.mid(0, path.size() - 1),
                     path.back() + (delta > 0 ? delta + 1 : delta));
}

bool ModelDesigner::wrapInResidual(const LayerPath& path) {
    DesignedModel next = m_model;
    nn::LayerSpec* spec = layerAt(next.layers, path);
    if (!spec) return false;
    nn::LayerSpec block;
    block.type = "residual";
    block.layers.push_back(std::move(*spec));
    *spec = std::move(block);
    const QString message = commit(tr("Wrap in residual"), std::move(next), path);
    m_properties->showError(message);
    return message.isEmpty();
}

QString ModelDesigner::setLayerOption(const LayerPath& path, const QString& key,
                                      const QString& value) {
    if (!layerAt(m_model.layers, path)) return tr("no layer selected");
    json j = run::to_json(experiment());
    json* layer = layerJson(j, path);
    if (!layer) return tr("no layer at %1").arg(layerPathString(path));
    json v;
    try {
        v = json::parse(value.toStdString());
    } catch (const std::exception&) {
        v = value.toStdString();
    }
    if (v.is_null())
        layer->erase(key.toStdString());
    else
        (*layer)[key.toStdString()] = v;
    // A block's MLP turned into a mixture of experts and back: its width carried over as each
    // expert's (8 experts, 2 per token), and the options of the other kind removed.
    if (key == QLatin1String("mlp") && layer->value("type", "") == "transformer_block") {
        if (v == "moe" && !layer->contains("experts")) {
            (*layer)["experts"] = 8;
            (*layer)["top_k"] = 2;
            (*layer)["expert_ffn"] = layer->value("ffn", json(64));
            layer->erase("ffn");
        } else if (v != "moe" && layer->contains("experts")) {
            if (!layer->contains("ffn")) (*layer)["ffn"] = layer->value("expert_ffn", json(64));
            for (const char* k : {"experts", "top_k", "expert_ffn", "shared_experts", "capacity_factor", "aux_loss",
                                  "router_z_loss"})
                layer->erase(k);
        }
    }
    // pool stride 0 means "the kernel size", which the file says by leaving stride out.
    if (key == QLatin1String("stride") && v == 0 &&
        (layer->value("type", "") == "maxpool2d" || layer->value("type", "") == "avgpool2d"))
        layer->erase("stride");
    config::Experiment parsed;
    try {
        parsed = run::parse_experiment(j);
    } catch (const std::exception& err) {
        return QString::fromUtf8(err.what());
    }
    return commit(tr("Set %1").arg(key), DesignedModel{parsed.layers, parsed.input, parsed.loss},
                  path, layerPathString(path) + QLatin1Char('.') + key);
}

QString ModelDesigner::setInputText(const QString& text) {
    DesignedModel next = m_model;
    const QStringList parts =
        text.split(QRegularExpression(QStringLiteral("[,\\s\\[\\]]+")), Qt::SkipEmptyParts);
    if (parts.isEmpty()) {
        if (!m_model.input) return {};
        next.input.reset();
        return commit(tr("Input from the data set"), std::move(next), selectedPath());
    }
    json dims = json::array();
    for (const QString& p : parts) {
        bool ok = false;
        const qlonglong v = p.toLongLong(&ok);
        dims.push_back(ok ? json(v) : json(p.toStdString()));
    }
    json j = run::to_json(experiment());
    j["model"]["input"] = dims;
    try {
        next.input = run::parse_experiment(j).input;
    } catch (const std::exception& err) {
        return QString::fromUtf8(err.what());
    }
    if (next.input == m_model.input) return {};
    return commit(tr("Set input"), std::move(next), selectedPath());
}

QString ModelDesigner::setLoss(const QString& loss) {
    if (loss.toStdString() == m_model.loss) return {};
    DesignedModel next = m_model;
    next.loss = loss.toStdString();
    return commit(tr("Set loss"), std::move(next), selectedPath());
}

// --- view -------------------------------------------------------------------------------------

void ModelDesigner::apply(const DesignedModel& m, const LayerPath& select) {
    m_model = m;
    startInference(select);
    emit modelEdited(experiment());
}

// Inference runs on a worker (std::async) and the GUI thread waits for it up to the synchronous
// budget: a small model's shapes appear within the edit, as if computed in place. A bigger one
// (a few hundred ms for 224x224 convolution stacks: the build allocates every parameter and
// workspace) leaves the stack showing "…" and the GUI responsive; a 20 ms timer picks the result
// up, and a result for a model that has been edited since is dropped.
void ModelDesigner::startInference(const LayerPath& select) {
    if (m_jobs->current.valid()) m_jobs->stale.push_back(std::move(m_jobs->current));
    // The data set's example shape is read even when model.input is given: a run refuses an
    // input that is not the data's, so the designer does too. (A data set that cannot be read
    // stops the designer only when the model takes its input from it.)
    if (!m_dataInput && m_dataInputError.isEmpty()) readDataInput();
    const std::optional<Shape> input = m_model.input ? m_model.input : m_dataInput;
    if (!input || (m_model.input && m_dataInput && *m_model.input != *m_dataInput)) {
        m_report = ShapeReport{};
        m_report.message = input ? tr("model.input: %1 does not match the data set's examples, which are %2")
                                       .arg(shapeText(*m_model.input), shapeText(*m_dataInput))
                                 : m_dataInputError;
        showReport(select);
        return;
    }
    m_jobs->current = std::async(std::launch::async,
                                 [model = m_model, in = *input] { return inferShapes(model, in); });
    if (m_jobs->current.wait_for(std::chrono::milliseconds(m_syncBudgetMs)) ==
        std::future_status::ready) {
        m_report = m_jobs->current.get();
    } else {
        m_report = ShapeReport{};
        m_poll->start();
    }
    showReport(select);
}

void ModelDesigner::pollInference() {
    auto& stale = m_jobs->stale;
    stale.erase(std::remove_if(stale.begin(), stale.end(),
                               [](auto& f) {
                                   return f.wait_for(std::chrono::seconds(0)) ==
                                          std::future_status::ready;
                               }),
                stale.end());
    if (m_jobs->current.valid() &&
        m_jobs->current.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
        m_report = m_jobs->current.get();
        showReport(selectedPath());
    }
    if (stale.empty() && !m_jobs->current.valid()) m_poll->stop();
}

bool ModelDesigner::shapesPending() const {
    return m_jobs->current.valid();
}

void ModelDesigner::showReport(const LayerPath& select) {
    m_applying = true;
    refresh();
    rebuildTree(select);
    m_applying = false;
    showSelection();
    if (shapesPending()) return;  // the verdict comes with the result
    if (m_announceValidity || m_report.ok != m_wasValid || !m_report.ok)
        emit validityChanged(m_report.ok, m_report.message);
    m_announceValidity = false;
    m_wasValid = m_report.ok;
}

void ModelDesigner::refresh() {
    const std::optional<Shape> input = m_model.input ? m_model.input : m_dataInput;
    // A refused text stays in the field beside its error until it is fixed or replaced.
    if (m_inputErrorText.isEmpty())
        m_input->setText(m_model.input ? QString::fromStdString(m_model.input->to_string()).mid(1).chopped(1)
                                       : QString());
    m_input->setPlaceholderText(m_dataInput
                                    ? tr("from the data set: %1").arg(shapeText(*m_dataInput))
                                    : tr("from the data set"));
    m_loss->setCurrentText(QString::fromStdString(m_model.loss));
    const QLocale locale;
    if (m_report.ok) {
        m_totals->setText(
            tr("Input %1 → output %2 · %3 parameters (%4) · %5 per example forward · "
               "activations %6 per example")
                .arg(shapeText(*input), shapeText(m_report.output),
                     locale.toString(static_cast<qlonglong>(m_report.parameters)),
                     formatBytes(4 * m_report.parameters),
                     siCount(static_cast<double>(m_report.flops), QStringLiteral("FLOP")),
                     formatBytes(m_report.activationBytes)));
    } else if (shapesPending()) {
        m_totals->setText(tr("Inferring shapes…"));
    } else {
        m_totals->setText(input ? tr("Input %1").arg(shapeText(*input)) : QString());
    }
    m_error->setText(m_report.ok ? QString() : m_report.message);
    m_error->setVisible(!m_report.ok && !m_report.message.isEmpty());
}

void ModelDesigner::rebuildTree(const LayerPath& select) {
    std::map<std::string, const LayerShapeInfo*> rows;
    for (const auto& [path, info] : m_report.rows) rows[path] = &info;
    const QLocale locale;
    const QString errorPath =
        m_report.errorPath.isEmpty() ? QString() : layerPathString(m_report.errorPath);

    // A transformer_block's parts stay as the person left them (folded at first): the tree is
    // rebuilt on every edit.
    QSet<QString> unfolded;
    std::function<void(QTreeWidgetItem*)> remember = [&](QTreeWidgetItem* item) {
        if (item->isExpanded() &&
            item->data(LayerStackView::LayerColumn, Qt::UserRole).toString() ==
                QLatin1String("transformer_block"))
            unfolded.insert(layerPathString(m_stack->pathOf(item)));
        for (int i = 0; i < item->childCount(); ++i) remember(item->child(i));
    };
    for (int i = 0; i < m_stack->topLevelItemCount(); ++i) remember(m_stack->topLevelItem(i));
    QList<QTreeWidgetItem*> folded;

    const auto setCounts = [&](QTreeWidgetItem* item, const Shape& output, int64_t parameters,
                               int64_t flops, int64_t activationBytes) {
        item->setText(LayerStackView::OutputColumn, shapeText(output));
        item->setText(LayerStackView::ParamsColumn,
                      locale.toString(static_cast<qlonglong>(parameters)));
        item->setText(LayerStackView::FlopsColumn,
                      siCount(static_cast<double>(flops), QString()).trimmed());
        item->setText(LayerStackView::MemoryColumn, formatBytes(activationBytes));
    };
    const auto addParts = [&](QTreeWidgetItem* block, const QString& path,
                              const LayerShapeInfo& r) {
        // Between the text and the background: readable, and plainly not a row of the file.
        const QColor text = m_stack->palette().color(QPalette::Text);
        const QColor base = m_stack->palette().color(QPalette::Base);
        const QColor partText((2 * text.red() + base.red()) / 3,
                              (2 * text.green() + base.green()) / 3,
                              (2 * text.blue() + base.blue()) / 3);
        const QString tip =
            r.copies > 1
                ? tr("part of %1, read-only; counts are of its %2 copies").arg(path).arg(r.copies)
                : tr("part of %1, read-only").arg(path);
        for (const LayerPartInfo& part : r.parts) {
            auto* item = new QTreeWidgetItem(block);
            item->setFlags(Qt::ItemIsEnabled);
            item->setData(LayerStackView::LayerColumn, kLayerPartRole, true);
            // "attention ×4  4 heads, causal": the counts beside it are of every copy.
            item->setText(
                LayerStackView::LayerColumn,
                QString::fromStdString(part.type) +
                    (r.copies > 1 ? QStringLiteral(" ×%1").arg(r.copies) : QString()) +
                    (part.options.isEmpty() ? QString() : QStringLiteral("  ") + part.options));
            setCounts(item, part.output, part.parameters, part.flops, part.activationBytes);
            for (int c = 0; c < LayerStackView::ColumnCount; ++c) {
                item->setForeground(c, partText);
                item->setToolTip(c, tip);
                if (c >= LayerStackView::ParamsColumn)
                    item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
            }
        }
    };

    m_stack->clear();
    std::function<void(const std::vector<nn::LayerSpec>&, QTreeWidgetItem*, const QString&)> add =
        [&](const std::vector<nn::LayerSpec>& layers, QTreeWidgetItem* parent,
            const QString& prefix) {
            for (size_t i = 0; i < layers.size(); ++i) {
                const auto& spec = layers[i];
                const QString path = prefix + QStringLiteral(".layers[%1]").arg(i);
                auto* item = parent ? new QTreeWidgetItem(parent) : new QTreeWidgetItem(m_stack);
                item->setText(LayerStackView::LayerColumn, layerRowText(spec));
                item->setData(LayerStackView::LayerColumn, Qt::UserRole,
                              QString::fromStdString(spec.type));
                // The row, whole (a narrow column elides it), and where it is in the file.
                item->setToolTip(
                    LayerStackView::LayerColumn,
                    QStringLiteral("%1\n%2").arg(path, item->text(LayerStackView::LayerColumn)));
                for (int c = LayerStackView::ParamsColumn; c < LayerStackView::ColumnCount; ++c)
                    item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
                if (auto it = rows.find(path.toStdString()); it != rows.end()) {
                    const LayerShapeInfo& r = *it->second;
                    setCounts(item, r.output, r.parameters, r.flops, r.activationBytes);
                    if (r.copies > 1)
                        item->setToolTip(LayerStackView::ParamsColumn,
                                         tr("%1 copies, %2 parameters each")
                                             .arg(r.copies)
                                             .arg(locale.toString(
                                                 static_cast<qlonglong>(r.parameters / r.copies))));
                    if (!r.parts.empty()) {
                        addParts(item, path, r);
                        if (!unfolded.contains(path)) folded << item;
                    }
                } else {
                    item->setText(LayerStackView::OutputColumn,
                                  shapesPending() ? QStringLiteral("…") : QStringLiteral("—"));
                }
                if (path == errorPath) {
                    for (int c = 0; c < LayerStackView::ColumnCount; ++c) {
                        item->setForeground(c, kErrorText);
                        item->setBackground(c, kErrorBackground);
                        item->setToolTip(c, m_report.message);
                    }
                    item->setText(LayerStackView::OutputColumn, tr("shape error"));
                }
                if (spec.type == "residual") add(spec.layers, item, path);
            }
        };
    add(m_model.layers, nullptr, QStringLiteral("model"));
    m_stack->expandAll();
    for (QTreeWidgetItem* item : folded) item->setExpanded(false);
    m_stack->setCurrentItem(m_stack->itemAt(select));
}

void ModelDesigner::showSelection() {
    const LayerPath path = selectedPath();
    m_properties->showLayer(layerAt(m_model.layers, path), layerPathString(path));
    updateButtons();
}

void ModelDesigner::setLocked(bool locked) {
    if (locked == m_locked) return;
    m_locked = locked;
    m_lockNote->setVisible(locked);
    for (QWidget* w : std::initializer_list<QWidget*>{m_presets, m_palette, m_properties, m_input, m_loss})
        w->setEnabled(!locked);
    m_stack->setDragDropMode(locked ? QAbstractItemView::NoDragDrop : QAbstractItemView::DragDrop);
    m_undoAction->setEnabled(!locked && m_undo->canUndo());
    m_redoAction->setEnabled(!locked && m_undo->canRedo());
    updateButtons();
}

void ModelDesigner::updateButtons() {
    const LayerPath path = selectedPath();
    const bool any = !path.isEmpty();
    int siblings = 0;
    if (any) {
        auto* list = parentList(m_model.layers, path);
        siblings = list ? static_cast<int>(list->size()) : 0;
    }
    m_up->setEnabled(!m_locked && any && path.back() > 0);
    m_down->setEnabled(!m_locked && any && path.back() + 1 < siblings);
    m_delete->setEnabled(!m_locked && any);
    m_wrap->setEnabled(!m_locked && any);
}

}  // namespace paralab::ui
