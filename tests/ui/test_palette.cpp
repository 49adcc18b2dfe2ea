// The palette read by colour-blind eyes: every pair of timeline phase colours and of the first
// eight device colours, simulated for deuteranopia and protanopia (Machado, Oliveira & Fernandes
// 2009, severity 1, applied in linear RGB), stays at least kMinDeltaE apart in CIELAB (CIE76).
#include <QtTest>

#include <array>
#include <cmath>

#include "ui/panels/common/palette.h"

using namespace paralab::ui;

namespace {

constexpr double kMinDeltaE = 10.0;
using Matrix = std::array<std::array<double, 3>, 3>;
// Machado et al. 2009, Table 1, severity 1.0.
constexpr Matrix kDeuteranopia = {{{0.367322, 0.860646, -0.227968},
                                   {0.280085, 0.672501, 0.047413},
                                   {-0.011820, 0.042940, 0.968881}}};
constexpr Matrix kProtanopia = {{{0.152286, 1.052583, -0.204868},
                                 {0.114503, 0.786281, 0.099216},
                                 {-0.003882, -0.048116, 1.051998}}};
constexpr Matrix kNormal = {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};

double toLinear(double c) { return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }

// sRGB -> simulated linear RGB -> XYZ (D65) -> CIELAB.
std::array<double, 3> seenLab(const QColor& color, const Matrix& m) {
    const std::array<double, 3> lin = {toLinear(color.redF()), toLinear(color.greenF()), toLinear(color.blueF())};
    std::array<double, 3> rgb{};
    for (int i = 0; i < 3; ++i) {
        double v = 0;
        for (int j = 0; j < 3; ++j) v += m[i][j] * lin[j];
        rgb[i] = std::clamp(v, 0.0, 1.0);
    }
    const double x = 0.4124564 * rgb[0] + 0.3575761 * rgb[1] + 0.1804375 * rgb[2];
    const double y = 0.2126729 * rgb[0] + 0.7151522 * rgb[1] + 0.0721750 * rgb[2];
    const double z = 0.0193339 * rgb[0] + 0.1191920 * rgb[1] + 0.9503041 * rgb[2];
    auto f = [](double t) { return t > 216.0 / 24389 ? std::cbrt(t) : (24389.0 / 27 * t + 16) / 116; };
    const double fx = f(x / 0.95047), fy = f(y), fz = f(z / 1.08883);
    return {116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)};
}

double deltaE(const std::array<double, 3>& a, const std::array<double, 3>& b) {
    return std::hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]);
}

// The closest pair of `colors` for each kind of vision, named in the failure message.
void expectApart(const QList<QPair<QString, QColor>>& colors) {
    const QList<QPair<QString, Matrix>> visions = {
        {QStringLiteral("normal vision"), kNormal},
        {QStringLiteral("deuteranopia"), kDeuteranopia},
        {QStringLiteral("protanopia"), kProtanopia}};
    for (const auto& [vision, m] : visions)
        for (qsizetype i = 0; i < colors.size(); ++i)
            for (qsizetype j = i + 1; j < colors.size(); ++j) {
                const double d = deltaE(seenLab(colors[i].second, m), seenLab(colors[j].second, m));
                if (d < kMinDeltaE)
                    QFAIL(qPrintable(QStringLiteral("%1 and %2 are %3 apart under %4 (at least %5 wanted)")
                                         .arg(colors[i].first, colors[j].first)
                                         .arg(d, 0, 'f', 1)
                                         .arg(vision)
                                         .arg(kMinDeltaE)));
            }
}

}  // namespace

class PaletteTest : public QObject {
    Q_OBJECT
private slots:
    void simulationMatchesPublishedValues() {
        // The simulation itself: pure red under deuteranopia is Machado's first column (a dark
        // olive), and white stays white under both.
        const auto white = seenLab(Qt::white, kDeuteranopia);
        QVERIFY(std::abs(white[0] - 100) < 0.5);
        QVERIFY(std::hypot(white[1], white[2]) < 1.0);
        QVERIFY(deltaE(seenLab(Qt::white, kProtanopia), seenLab(Qt::white, kNormal)) < 1.0);
        // Red and green, which a deuteranope confuses, come out close; blue and yellow do not.
        QVERIFY(deltaE(seenLab(QColor(0xE4, 0x57, 0x56), kDeuteranopia), seenLab(QColor(0x54, 0xA2, 0x4B), kDeuteranopia)) <
                kMinDeltaE);
        QVERIFY(deltaE(seenLab(QColor(0x00, 0x72, 0xB2), kDeuteranopia), seenLab(QColor(0xF0, 0xE4, 0x42), kDeuteranopia)) >
                kMinDeltaE);
    }

    void phaseColorsStayApart() {
        QList<QPair<QString, QColor>> colors;
        for (int f = 0; f < palette::kPhaseFamilyCount; ++f) {
            const auto family = static_cast<palette::PhaseFamily>(f);
            colors.append({palette::phaseFamilyName(family), palette::phaseFamilyColor(family)});
        }
        expectApart(colors);
    }

    void deviceColorsStayApart() {
        // The first eight devices, and the curve over all devices drawn beside them.
        QList<QPair<QString, QColor>> colors;
        for (int d = 0; d < 8; ++d) colors.append({QStringLiteral("cpu:%1").arg(d), palette::deviceColor(d)});
        colors.append({QStringLiteral("all devices"), palette::globalColor()});
        expectApart(colors);
    }

    void memoryCategoriesStayApart() {
        // Stacked side by side in every memory bar: parameters, gradients, optimizer state,
        // activations, communication, workspace.
        const QStringList names = {"parameters", "gradients", "optimizer state", "activations", "communication", "workspace"};
        QList<QPair<QString, QColor>> colors;
        for (int c = 0; c < static_cast<int>(names.size()); ++c) colors.append({names[c], palette::memoryCategoryColor(c)});
        expectApart(colors);
    }

    void devicesPastEightGetNewShades() {
        // The documented extension: 9-16 darker, 17-24 lighter, each unlike the first eight.
        QSet<QRgb> seen;
        for (int d = 0; d < 24; ++d) seen.insert(palette::deviceColor(d).rgb());
        QCOMPARE(seen.size(), 24);
        QVERIFY(palette::deviceColor(8).lightness() < palette::deviceColor(0).lightness());
        QVERIFY(palette::deviceColor(16).lightness() > palette::deviceColor(0).lightness());
        QCOMPARE(palette::deviceColor(24), palette::deviceColor(0));
    }
};

QTEST_GUILESS_MAIN(PaletteTest)
#include "test_palette.moc"
