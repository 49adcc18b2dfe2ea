#include "ui/panels/designer/layer_property_editor.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSpinBox>
#include <QVBoxLayout>
#include <limits>

#include <nlohmann/json.hpp>

namespace paralab::ui {

LayerPropertyEditor::LayerPropertyEditor(QWidget* parent)
    : QWidget(parent),
      m_title(new QLabel),
      m_form(new QWidget),
      m_formLayout(new QFormLayout(m_form)),
      m_error(new QLabel) {
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_title->setTextFormat(Qt::RichText);
    m_formLayout->setContentsMargins(0, 0, 0, 0);
    m_formLayout->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
    m_error->setObjectName(QStringLiteral("propertyError"));
    m_error->setWordWrap(true);
    m_error->setStyleSheet(QStringLiteral("color: #c62828;"));
    m_error->hide();
    layout->addWidget(m_title);
    layout->addWidget(m_form);
    layout->addWidget(m_error);
    showLayer(nullptr, {});
}

void LayerPropertyEditor::showLayer(const nn::LayerSpec* spec, const QString& path) {
    // deleteLater: this runs from inside an editor's own signal (an edit applied, the layer shown
    // again), and that editor must outlive its emit.
    while (m_formLayout->rowCount() > 0) {
        const auto row = m_formLayout->takeRow(0);
        for (QLayoutItem* item : {row.labelItem, row.fieldItem}) {
            if (!item) continue;
            if (QWidget* w = item->widget()) {
                w->hide();
                w->setParent(nullptr);  // gone from the form (and findChild) at once
                w->deleteLater();
            }
            delete item;
        }
    }
    showError({});
    if (!spec) {
        m_title->setText(tr("<i>Select a layer to edit its options</i>"));
        return;
    }
    m_title->setText(tr("<b>%1</b> &nbsp;<span style='color:gray'>%2</span>")
                         .arg(QString::fromStdString(spec->type), path.toHtmlEscaped()));
    const std::string& t = spec->type;
    if (t == "linear") {
        addIntEditor("out", spec->out, tr("output features"));
        addBoolEditor("bias", spec->bias, tr("add a bias"));
        addBoolEditor("tie_embeddings", spec->tie_embeddings,
                      tr("the model's output layer: use the first embedding's table as the weight "
                         "(out must be its vocabulary)"));
    } else if (t == "conv2d") {
        addIntEditor("out_channels", spec->out_channels, tr("output channels"));
        addIntEditor("kernel", spec->kernel, tr("square kernel size"));
        addIntEditor("stride", spec->stride == 0 ? 1 : spec->stride, tr("stride"));
        addIntEditor("padding", spec->padding, tr("zero padding on every side"));
        addBoolEditor("bias", spec->bias, tr("add a bias"));
    } else if (t == "maxpool2d" || t == "avgpool2d") {
        addIntEditor("kernel", spec->kernel, tr("window size"));
        addIntEditor("stride", spec->stride, tr("stride; 0: the kernel size"));
    } else if (t == "batchnorm") {
        addFloatEditor("eps", spec->eps, tr("added to the variance"));
        addFloatEditor("momentum", spec->momentum, tr("running statistics update rate"));
    } else if (t == "layernorm") {
        addFloatEditor("eps", spec->eps, tr("added to the variance"));
    } else if (t == "rmsnorm") {
        addFloatEditor("eps", spec->eps, tr("added to the mean of the squares"));
        addBoolEditor("bias", spec->bias, tr("add a bias after the scale"));
    } else if (t == "dropout") {
        addFloatEditor("p", spec->p, tr("probability of zeroing an element, in [0, 1)"));
    } else if (t == "embedding") {
        addIntEditor("vocab", spec->vocab, tr("number of tokens"));
        addIntEditor("dim", spec->dim, tr("vector size"));
    } else if (t == "lstm" || t == "gru") {
        addIntEditor("hidden", spec->hidden, tr("hidden size"));
        addIntEditor("num_layers", spec->num_layers, tr("stacked layers"));
        addChoiceEditor("return", {"last", "sequence"},
                        spec->return_sequence ? "sequence" : "last");
    } else if (t == "attention" || t == "transformer_block") {
        addIntEditor("heads", spec->heads, tr("attention heads; each is width / heads wide"));
        addIntEditor("kv_heads", spec->kv_heads > 0 ? spec->kv_heads : spec->heads,
                     tr("key/value heads (grouped-query attention); must divide heads; 1: multi-query"));
        if (t == "transformer_block" && spec->mlp != "moe")
            addIntEditor("ffn", spec->ffn, tr("the MLP's hidden width, usually 4 times the width"));
        addChoiceEditor("position", {"none", "rope"}, QString::fromStdString(spec->position));
        if (spec->position == "rope")
            addFloatEditor("rope_theta", spec->rope_theta, tr("the base of the rotary frequencies"));
        addBoolEditor("bias", spec->bias, tr("biases in the block's linears and layernorms"));
        if (t == "transformer_block") {
            addChoiceEditor("norm", {"layernorm", "rmsnorm"}, QString::fromStdString(spec->norm));
            addChoiceEditor("mlp", {"gelu", "swiglu", "moe"}, QString::fromStdString(spec->mlp));
            if (spec->mlp == "moe") addMixtureOfExpertsEditors(*spec);
        }
        addBoolEditor("causal", spec->causal, tr("position i attends to positions up to i only"));
        addFloatEditor("dropout", spec->dropout,
                       tr("dropout of the attention probabilities and outputs, in [0, 1)"));
        // Absent from the file: fused, unless the probabilities are dropped out.
        const std::string kernel =
            !spec->attention_kernel.empty() ? spec->attention_kernel : spec->dropout > 0 ? "materialized" : "fused";
        addChoiceEditor("kernel", {"fused", "materialized"}, QString::fromStdString(kernel));
        if (t == "transformer_block")
            addNote(
                tr("x + attention(norm(x)), then x + mlp(norm(x)); gelu: linear(gelu(linear_ffn)), "
                   "swiglu: down(silu(gate) * up), moe: the top_k of several SwiGLU experts chosen per "
                   "token by a router: expand the row to see its parts."));
    } else if (t == "position_embedding") {
        addNote(tr("adds a learned table of one vector per position to its [T, D] input"));
    } else if (t == "residual") {
        addNote(
            tr("output = input + body(input); a projection is added when the "
               "shapes differ. Drop layers onto the block to add them to its body."));
    }
    // Every layer: copies in a row, each with its own parameters.
    addIntEditor("repeat", spec->repeat,
                 tr("consecutive copies of this layer, each with its own parameters"));
}

// The options of `mlp: "moe"` (docs/experiment-format.md, "Today's models").
void LayerPropertyEditor::addMixtureOfExpertsEditors(const nn::LayerSpec& spec) {
    addIntEditor("experts", spec.experts, tr("routed experts, each a SwiGLU MLP of width expert_ffn"));
    addIntEditor("top_k", spec.top_k, tr("experts each token goes to (at most experts)"));
    addIntEditor("expert_ffn", spec.expert_ffn, tr("each expert's hidden width"));
    addIntEditor("shared_experts", spec.shared_experts, tr("SwiGLU MLPs every token goes through"));
    // Empty: null, dropless.
    auto* capacity = new QLineEdit(spec.capacity_factor > 0 ? QString::number(spec.capacity_factor, 'g', 8) : QString());
    capacity->setObjectName(QStringLiteral("option_capacity_factor"));
    capacity->setPlaceholderText(tr("dropless"));
    capacity->setToolTip(tr("each expert takes at most ceil(capacity_factor · tokens · top_k / experts) tokens "
                            "of a micro-batch, the rest dropped; empty: dropless"));
    connect(capacity, &QLineEdit::editingFinished, this, [this, capacity] {
        const QString text = capacity->text().trimmed();
        bool ok = false;
        const double v = text.toDouble(&ok);
        emit optionEdited(QStringLiteral("capacity_factor"),
                          text.isEmpty() ? QStringLiteral("null")
                          : ok           ? QString::fromStdString(nlohmann::json(v).dump())
                                         : QString::fromStdString(nlohmann::json(text.toStdString()).dump()));
    });
    m_formLayout->addRow(QStringLiteral("capacity_factor"), capacity);
    addFloatEditor("aux_loss", spec.aux_loss, tr("load-balancing loss coefficient (E · Σ f_e · P_e)"));
    addFloatEditor("router_z_loss", spec.router_z_loss, tr("router z-loss coefficient (mean logsumexp²)"));
}

void LayerPropertyEditor::addNote(const QString& text) {
    auto* note = new QLabel(text);
    note->setWordWrap(true);
    m_formLayout->addRow(note);
}

void LayerPropertyEditor::showError(const QString& message) {
    m_error->setText(message);
    m_error->setVisible(!message.isEmpty());
}

QString LayerPropertyEditor::errorText() const {
    return m_error->text();
}

void LayerPropertyEditor::addIntEditor(const QString& key, qint64 value, const QString& tip) {
    auto* spin = new QSpinBox;
    spin->setObjectName(QStringLiteral("option_") + key);
    // The full int range: the file format's parser, not the widget, says what is allowed.
    spin->setRange(std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    spin->setValue(static_cast<int>(value));
    spin->setKeyboardTracking(false);
    spin->setToolTip(tip);
    connect(spin, &QSpinBox::valueChanged, this,
            [this, key](int v) { emit optionEdited(key, QString::number(v)); });
    m_formLayout->addRow(key, spin);
}

void LayerPropertyEditor::addFloatEditor(const QString& key, double value, const QString& tip) {
    auto* edit = new QLineEdit(QString::number(value, 'g', 8));
    edit->setObjectName(QStringLiteral("option_") + key);
    edit->setToolTip(tip);
    connect(edit, &QLineEdit::editingFinished, this, [this, key, edit] {
        bool ok = false;
        const double v = edit->text().trimmed().toDouble(&ok);
        // Not a number: hand the text over as a JSON string; the parser says what it expected.
        emit optionEdited(
            key, ok ? QString::fromStdString(nlohmann::json(v).dump())
                    : QString::fromStdString(nlohmann::json(edit->text().toStdString()).dump()));
    });
    m_formLayout->addRow(key, edit);
}

void LayerPropertyEditor::addBoolEditor(const QString& key, bool value, const QString& tip) {
    auto* box = new QCheckBox;
    box->setObjectName(QStringLiteral("option_") + key);
    box->setChecked(value);
    box->setToolTip(tip);
    connect(box, &QCheckBox::toggled, this, [this, key](bool on) {
        emit optionEdited(key, on ? QStringLiteral("true") : QStringLiteral("false"));
    });
    m_formLayout->addRow(key, box);
}

void LayerPropertyEditor::addChoiceEditor(const QString& key, const QStringList& choices,
                                          const QString& value) {
    auto* combo = new QComboBox;
    combo->setObjectName(QStringLiteral("option_") + key);
    combo->addItems(choices);
    combo->setCurrentText(value);
    connect(combo, &QComboBox::currentTextChanged, this, [this, key](const QString& text) {
        emit optionEdited(key, QString::fromStdString(nlohmann::json(text.toStdString()).dump()));
    });
    m_formLayout->addRow(key, combo);
}

}  // namespace paralab::ui
