#include "ui/panels/common/palette.h"

#include <QRegularExpression>

#include <algorithm>
#include <array>

namespace paralab::ui::palette {

namespace {
// Tableau 10 (matplotlib's tab10 in a refreshed tone): distinct for most colour-blind readers in
// its first few entries, which are the ones a run of 2-4 devices uses.
constexpr std::array<QRgb, 10> kDevices = {0x4E79A7, 0xF28E2B, 0x59A14F, 0xE15759, 0xB07AA1,
                                           0x76B7B2, 0xEDC948, 0xFF9DA7, 0x9C755F, 0xBAB0AC};
// Dark2 (ColorBrewer): six categories that stay apart when stacked next to each other.
constexpr std::array<QRgb, 6> kMemory = {0x1B9E77, 0xD95F02, 0x7570B3, 0xE7298A, 0x66A61E, 0xE6AB02};

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
    return QColor::fromRgb(kDevices[static_cast<size_t>(std::max(position, 0)) % kDevices.size()]);
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
    if (phase == QLatin1String("forward")) return PhaseFamily::forward;
    if (phase == QLatin1String("backward")) return PhaseFamily::backward;
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
        case PhaseFamily::compute: return QStringLiteral("optimizer / other compute");
        case PhaseFamily::communication: return QStringLiteral("communication");
        case PhaseFamily::idle: return QStringLiteral("idle / waiting");
        case PhaseFamily::data_wait: return QStringLiteral("data wait");
    }
    return {};
}

QColor phaseFamilyColor(PhaseFamily family) {
    // Compute in cool colours, communication red, waiting grey, data yellow: what a student
    // should look for (the red overlapping the green in DDP, the grey bubble of a pipeline)
    // stands out.
    switch (family) {
        case PhaseFamily::forward: return QColor::fromRgb(0x4C78A8u);
        case PhaseFamily::backward: return QColor::fromRgb(0x54A24Bu);
        case PhaseFamily::compute: return QColor::fromRgb(0xB279A2u);
        case PhaseFamily::communication: return QColor::fromRgb(0xE45756u);
        case PhaseFamily::idle: return QColor::fromRgb(0xC9C3BFu);
        case PhaseFamily::data_wait: return QColor::fromRgb(0xEECA3Bu);
    }
    return Qt::black;
}

QColor computeColor() { return phaseFamilyColor(PhaseFamily::forward); }

QColor memoryCategoryColor(int category) {
    return QColor::fromRgb(kMemory[static_cast<size_t>(std::max(category, 0)) % kMemory.size()]);
}

}  // namespace paralab::ui::palette
