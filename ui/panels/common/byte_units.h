// Byte counts as the window shows them: binary units (B, KiB, MiB, GiB, TiB) everywhere, as
// the CLI prints them, so that a number read in one panel compares with another's.
#pragma once

#include <QString>
#include <QtGlobal>

namespace paralab::ui {

// 512 -> "512 B", 1536 -> "1.5 KiB", 3 << 20 -> "3.0 MiB", 310 << 10 -> "310 KiB": one decimal
// below 10 of the unit, none above.
QString formatBytes(qint64 bytes);

// The unit of a scale (an axis, a chart) whose largest value is `largest` bytes: the largest
// binary unit that keeps it at 1 or more ("B" below 1 KiB).
struct ByteUnit {
    double bytes;      // 1, 1024, 1024², ...
    QString name;      // "B", "KiB", "MiB", "GiB", "TiB"
};
ByteUnit byteUnitFor(double largest);

}  // namespace paralab::ui
