#include "ui/panels/common/byte_units.h"

#include <cmath>

namespace paralab::ui {

namespace {
constexpr const char* kUnitNames[] = {"B", "KiB", "MiB", "GiB", "TiB"};
constexpr int kLargestUnit = 4;
}  // namespace

ByteUnit byteUnitFor(double largest) {
    double unit = 1;
    int u = 0;
    while (std::abs(largest) / unit >= 1024 && u < kLargestUnit) {
        unit *= 1024;
        ++u;
    }
    return {unit, QLatin1String(kUnitNames[u])};
}

QString formatBytes(qint64 bytes) {
    const ByteUnit unit = byteUnitFor(static_cast<double>(bytes));
    if (unit.bytes == 1) return QStringLiteral("%1 B").arg(bytes);
    const double v = static_cast<double>(bytes) / unit.bytes;
    return QStringLiteral("%1 %2").arg(v, 0, 'f', std::abs(v) < 10 ? 1 : 0).arg(unit.name);
}

}  // namespace paralab::ui
