#include "ui/panels/common/palette.h"

#include <QRegularExpression>

#include <algorithm>
#include <array>

namespace paralab::ui::palette {

namespace {
// Okabe & Ito's colour-blind-safe set ("Color Universal Design", 2008) in the order a run uses
// them: blue, orange, bluish green, vermillion, sky blue, reddish purple, yellow. Its eighth, black,
// is the curve over all devices (globalColor), so the eighth device takes Paul Tol's wine, which
// stays as far from the others under deuteranopia and protanopia (tests/ui/test_palette.cpp).
constexpr std::array<QRgb, 8> kDevices = {0x0072B2, 0xE69F00, 0x009E73, 0xD55E00,
                                          0x56B4E9, 0xCC79A7, 0xF0E442, 0x882255};
// Six categories stacked side by side in every memory bar: Dark2's (ColorBrewer) teal, orange,
// purple and mustard, with sky blue for activations and indigo for communication (Dark2's pink
// and second green ran into its teal under deuteranopia); at least dE 18 apart under normal
// vision, deuteranopia and protanopia (tests/ui/test_palette.cpp).
constexpr std::array<QRgb, 6> kMemory = {0x1B9E77, 0xD95F02, 0x7570B3, 0x56B4E9, 0x332288, 0xE6AB02};

struct DeviceKey {
    QString kind;
    qint64 index;
};
DeviceKey deviceKey(const QString& name) {
    static const QRegularExpression re(QStringLiteral("^(.*?):?(\\d+)$"));
    const auto m = re.match(name);
    if (!m.hasMatch()) return {name, -1};
    return {m.captured(1), m.captured(2).toLongLong()};
}
}  // namespace

QColor deviceColor(int position) {
    const size_t p = static_cast<size_t>(std::max(position, 0));
    const QColor base = QColor::fromRgb(kDevices[p % kDevices.size()]);
    // Past eight devices the hues come round again, darker, then lighter, then as they were:
    // the ninth device is a dark blue, the seventeenth a light one.
    switch ((p / kDevices.size()) % 3) {
        case 1: return base.darker(160);
        case 2: return base.lighter(140);
        default: return base;
    }
}

QColor globalColor() { return QColor(40, 40, 40); }

bool deviceOrderLess(const QString& a, const QString& b) {
    const DeviceKey ka = deviceKey(a), kb = deviceKey(b);
    if (ka.kind != kb.kind) return ka.kind < kb.kind;
    if (ka.index != kb.index) return ka.index < kb.index;
    return a < b;
}

int insertDevice(QStringList& devices, const QString& device) {
    const auto it = std::lower_bound(devices.begin(), devices.end(), device, deviceOrderLess);
    const int position = static_cast<int>(it - devices.begin());
    if (it == devices.end() || *it != device) devices.insert(position, device);
    return position;
}

PhaseFamily phaseFamilyOf(const QString& phase, qint64 bytes) {
    // An interleaved pipeline names the chunk: "forward chunk 1"; single's step replayed as one
    // CUDA graph is "forward+backward (CUDA graph)", drawn as forward.
    if (phase == QLatin1String("forward") || phase.startsWith(QLatin1String("forward chunk ")) ||
        phase.startsWith(QLatin1String("forward+backward")))
        return PhaseFamily::forward;
    // A zero-bubble pipeline splits a backward into "backward_input" (B) and "backward_weight" (W).
    if (phase == QLatin1String("backward") || phase.startsWith(QLatin1String("backward chunk ")) ||
        phase.startsWith(QLatin1String("backward_input")))
        return PhaseFamily::backward;
    if (phase.startsWith(QLatin1String("backward_weight"))) return PhaseFamily::weight_grad;
    if (phase == QLatin1String("data_wait")) return PhaseFamily::data_wait;
    if (phase.startsWith(QLatin1String("wait")) || phase.startsWith(QLatin1String("recv")) ||
        phase.startsWith(QLatin1String("idle")))
        return PhaseFamily::idle;
    static const char* const kComm[] = {"all_reduce", "reduce", "all_gather", "gather", "scatter",
                                        "broadcast", "send", "push", "pull"};
    for (const char* prefix : kComm)
        if (phase.startsWith(QLatin1String(prefix))) return PhaseFamily::communication;
    return bytes > 0 ? PhaseFamily::communication : PhaseFamily::compute;
}

QString phaseFamilyName(PhaseFamily family) {
    switch (family) {
        case PhaseFamily::forward: return QStringLiteral("forward");
        case PhaseFamily::backward: return QStringLiteral("backward");
        case PhaseFamily::weight_grad: return QStringLiteral("weight gradients (W)");
        case PhaseFamily::compute: return QStringLiteral("optimizer / other compute");
        case PhaseFamily::communication: return QStringLiteral("communication");
        case PhaseFamily::idle: return QStringLiteral("idle / waiting");
        case PhaseFamily::data_wait: return QStringLiteral("data wait");
    }
    return {};
}

QColor phaseFamilyColor(PhaseFamily family) {
    // Okabe & Ito's set: compute in blues and greens (a zero-bubble pipeline's deferred weight
    // gradients a dark teal beside the backward's green), communication vermillion, waiting grey,
    // data yellow, so that what a student should look for (the vermillion overlapping the green
    // in DDP, the grey bubble of a pipeline) stands out for every reader, deuteranopes and
    // protanopes included (tests/ui/test_palette.cpp).
    switch (family) {
        case PhaseFamily::forward: return QColor::fromRgb(0x0072B2u);
        case PhaseFamily::backward: return QColor::fromRgb(0x009E73u);
        case PhaseFamily::weight_grad: return QColor::fromRgb(0x004D40u);
        case PhaseFamily::compute: return QColor::fromRgb(0xCC79A7u);
        case PhaseFamily::communication: return QColor::fromRgb(0xD55E00u);
        case PhaseFamily::idle: return QColor::fromRgb(0xBBBBBBu);
        case PhaseFamily::data_wait: return QColor::fromRgb(0xF0E442u);
    }
    return Qt::black;
}

QColor computeColor() { return phaseFamilyColor(PhaseFamily::forward); }

QColor memoryCategoryColor(int category) {
    return QColor::fromRgb(kMemory[static_cast<size_t>(std::max(category, 0)) % kMemory.size()]);
}

}  // namespace paralab::ui::palette
