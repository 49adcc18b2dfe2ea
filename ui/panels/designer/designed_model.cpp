#include "ui/panels/designer/designed_model.h"

#include <QRegularExpression>
#include <map>

#include "engine/device/device.h"
#include "engine/nn/attention.h"
#include "engine/nn/factory.h"
#include "engine/nn/model.h"
#include "engine/nn/moe.h"
#include "engine/nn/swiglu.h"

namespace paralab::ui {

QString layerPathString(const LayerPath& path) {
    QString s = QStringLiteral("model");
    for (int i : path) s += QStringLiteral(".layers[%1]").arg(i);
    return s;
}

LayerPath layerPathOf(const std::string& jsonPath) {
    static const QRegularExpression head(QStringLiteral("^model((?:\\.layers\\[\\d+\\])+)"));
    static const QRegularExpression index(QStringLiteral("\\[(\\d+)\\]"));
    LayerPath path;
    const auto m = head.match(QString::fromStdString(jsonPath));
    if (!m.hasMatch()) return path;
    auto it = index.globalMatch(m.captured(1));
    while (it.hasNext()) path << it.next().captured(1).toInt();
    return path;
}

std::vector<nn::LayerSpec>* parentList(std::vector<nn::LayerSpec>& layers, const LayerPath& path) {
    if (path.isEmpty()) return nullptr;
    std::vector<nn::LayerSpec>* list = &layers;
    for (int depth = 0; depth + 1 < path.size(); ++depth) {
        const int i = path[depth];
        if (i < 0 || i >= static_cast<int>(list->size())) return nullptr;
        list = &(*list)[static_cast<size_t>(i)].layers;
    }
    return list;
}

nn::LayerSpec* layerAt(std::vector<nn::LayerSpec>& layers, const LayerPath& path) {
    auto* list = parentList(layers, path);
    if (!list || path.back() < 0 || path.back() >= static_cast<int>(list->size())) return nullptr;
    return &(*list)[static_cast<size_t>(path.back())];
}

const nn::LayerSpec* layerAt(const std::vector<nn::LayerSpec>& layers, const LayerPath& path) {
    return layerAt(const_cast<std::vector<nn::LayerSpec>&>(layers), path);
}

nn::LayerSpec defaultLayer(const std::string& type) {
    nn::LayerSpec s;
    s.type = type;
    if (type == "linear") s.out = 10;
    if (type == "conv2d") s.out_channels = 16, s.kernel = 3, s.stride = 1, s.padding = 1;
    if (type == "maxpool2d" || type == "avgpool2d") s.kernel = 2;
    if (type == "dropout") s.p = 0.5;
    if (type == "embedding") s.vocab = 1000, s.dim = 32;
    if (type == "lstm" || type == "gru") s.hidden = 32;
    if (type == "residual") s.layers.push_back(defaultLayer("relu"));
    if (type == "attention") s.heads = 4;
    if (type == "transformer_block") s.heads = 4, s.ffn = 512;
    if (type == "rmsnorm") s.bias = false;  // torch.nn.RMSNorm's form: a weight only
    return s;
}

QString layerOptionsText(const nn::LayerSpec& s) {
    const std::string& t = s.type;
    if (t == "linear")
        return QStringLiteral("out %1%2%3").arg(s.out).arg(s.bias ? "" : ", no bias").arg(s.tie_embeddings ? ", tied" : "");
    if (t == "conv2d")
        return QStringLiteral("%1 ch, %2×%2%3%4")
            .arg(s.out_channels)
            .arg(s.kernel)
            .arg(s.stride > 1 ? QStringLiteral(", stride %1").arg(s.stride) : QString())
            .arg(s.padding ? QStringLiteral(", pad %1").arg(s.padding) : QString());
    if (t == "maxpool2d" || t == "avgpool2d")
        return QStringLiteral("%1×%1%2").arg(s.kernel).arg(
            s.stride ? QStringLiteral(", stride %1").arg(s.stride) : QString());
    if (t == "dropout") return QStringLiteral("p %1").arg(s.p);
    if (t == "embedding") return QStringLiteral("%1 → %2").arg(s.vocab).arg(s.dim);
    if (t == "lstm" || t == "gru")
        return QStringLiteral("hidden %1%2, %3")
            .arg(s.hidden)
            .arg(s.num_layers > 1 ? QStringLiteral(" ×%1").arg(s.num_layers) : QString())
            .arg(s.return_sequence ? "sequence" : "last");
    if (t == "residual") return QStringLiteral("%1 layers").arg(s.layers.size());
    if (t == "attention" || t == "transformer_block") {
        QString text = QStringLiteral("%1 heads").arg(s.heads);
        if (s.kv_heads > 0 && s.kv_heads != s.heads) text += QStringLiteral(" (%1 kv)").arg(s.kv_heads);
        if (t == "transformer_block" && s.mlp != "moe") text += QStringLiteral(", ffn %1").arg(s.ffn);
        if (s.position == "rope") text += QStringLiteral(", rope");
        if (t == "transformer_block" && s.norm != "layernorm") text += QStringLiteral(", ") + QString::fromStdString(s.norm);
        if (t == "transformer_block" && s.mlp != "gelu") text += QStringLiteral(", ") + QString::fromStdString(s.mlp);
        if (t == "transformer_block" && s.mlp == "moe")
            text += QStringLiteral(" (%1 experts, top %2, ffn %3%4)")
                        .arg(s.experts)
                        .arg(s.top_k)
                        .arg(s.expert_ffn)
                        .arg(s.shared_experts > 0 ? QStringLiteral(", %1 shared").arg(s.shared_experts) : QString());
        if (!s.bias) text += QStringLiteral(", no bias");
        if (!s.causal) text += QStringLiteral(", not causal");
        if (s.dropout > 0) text += QStringLiteral(", dropout %1").arg(s.dropout);
        return text;
    }
    return {};
}

QString layerRowText(const nn::LayerSpec& s) {
    QString text = QString::fromStdString(s.type);
    if (s.repeat > 1) text += QStringLiteral(" ×%1").arg(s.repeat);
    const QString options = layerOptionsText(s);
    if (!options.isEmpty()) text += QStringLiteral("  ") + options;
    return text;
}

namespace {

// A transformer_block's parts, read from one copy built on the meta device (shapes and counts,
// no memory): norm, attention, norm, then linear ffn, gelu, linear D, swiglu or moe[, dropout]. Counts are
// that copy's times `copies`, so that the parts add up to the block's row.
std::vector<LayerPartInfo> transformerParts(const nn::LayerSpec& spec, const Shape& input,
                                            int64_t copies) {
    nn::LayerSpec one = spec;
    one.repeat = 1;
    const std::unique_ptr<nn::Layer> block = nn::make_layer(one);
    block->build(input, DType::f32, meta_device());
    std::vector<LayerPartInfo> parts;
    for (nn::Layer* residual : block->children()) {      // x + attention(...), x + mlp(...)
        nn::Layer* body = residual->children().front();  // the residual's body, a Sequential
        for (nn::Layer* layer : body->children()) {
            LayerPartInfo part;
            part.type = layer->type();
            part.output = layer->output_shape();
            if (part.type == "linear")
                part.options = QStringLiteral("out %1").arg(part.output.back());
            if (const auto* attention = dynamic_cast<const nn::Attention*>(layer))
                part.options = QStringLiteral("%1 heads%2%3")
                                   .arg(attention->heads())
                                   .arg(attention->kv_heads() != attention->heads()
                                            ? QStringLiteral(" (%1 kv)").arg(attention->kv_heads())
                                            : QString())
                                   .arg(attention->causal() ? ", causal" : "");
            if (const auto* swiglu = dynamic_cast<const nn::SwiGLU*>(layer))
                part.options = QStringLiteral("ffn %1").arg(swiglu->ffn());
            if (const auto* moe = dynamic_cast<const nn::MoE*>(layer)) {
                const nn::MoEOptions& o = moe->options();
                part.options = QStringLiteral("%1 experts, top %2, ffn %3%4, FLOPs of the active ones")
                                   .arg(o.experts)
                                   .arg(o.top_k)
                                   .arg(o.expert_ffn)
                                   .arg(o.shared_experts > 0 ? QStringLiteral(", %1 shared").arg(o.shared_experts)
                                                             : QString());
            }
            part.parameters = layer->parameter_count() * copies;
            part.flops = layer->flops_per_sample() * copies;
            part.activationBytes = layer->activations_per_sample() * 4 * copies;
            parts.push_back(std::move(part));
        }
    }
    return parts;
}

void collectRows(const nn::ModelSummary& model, const std::vector<nn::LayerSpec>& layers,
                 ShapeReport& report) {
    for (const auto& row : model.layers) {
        LayerShapeInfo info;
        info.output = row.output;
        info.parameters = row.parameters;
        info.flops = row.flops;
        info.activationBytes = row.activations * 4;
        info.copies = row.copies;
        if (row.type == "transformer_block") {
            // [T, D] -> [T, D]: the block's input is its output's shape.
            // The whole model built, so one block builds too; should it not, the row has no parts.
            const nn::LayerSpec* spec = layerAt(layers, layerPathOf(row.path));
            if (spec && spec->type == row.type) {
                try {
                    info.parts = transformerParts(*spec, row.output, row.copies);
                } catch (const std::exception&) {
                }
            }
        }
        report.rows.emplace_back(row.path, info);
    }
}

}  // namespace

ShapeReport inferShapes(const DesignedModel& m, const Shape& input) {
    ShapeReport report;
    try {
        const nn::ModelSummary model = nn::summarize(m.layers, input, m.loss);
        collectRows(model, m.layers, report);
        report.ok = true;
        report.parameters = model.parameters;
        report.flops = model.flops_per_sample;
        report.output = model.output;
        for (const auto& [path, info] : report.rows)
            if (path.find('.', 6) == std::string::npos)
                report.activationBytes += info.activationBytes;
        return report;
    } catch (const ShapeError& err) {
        report.message = QString::fromUtf8(err.what());
        report.errorPath = layerPathOf(err.path());
    } catch (const ConfigError& err) {
        report.message = QString::fromUtf8(err.what());
        report.errorPath = layerPathOf(err.path());
    } catch (const std::exception& err) {
        report.message = QString::fromUtf8(err.what());
    }
    // The layers above the failing one still have shapes: build that prefix.
    const int failing = report.errorPath.isEmpty() ? 0 : report.errorPath.front();
    if (failing > 0 && failing <= static_cast<int>(m.layers.size())) {
        try {
            std::vector<nn::LayerSpec> prefix(m.layers.begin(), m.layers.begin() + failing);
            collectRows(nn::summarize(prefix, input, m.loss), prefix, report);
        } catch (const std::exception&) {  // the prefix has its own error: show none of it
        }
    }
    return report;
}

}  // namespace paralab::ui
