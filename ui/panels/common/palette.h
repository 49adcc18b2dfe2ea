// Colours shared by every plot, so that a device, a phase of the timeline and a memory category
// look the same wherever they appear.
#pragma once

#include <QColor>
#include <QString>
#include <QStringList>

namespace paralab::ui::palette {

// The colour of the device at `position` in deviceOrderLess order (cpu:0 first): eight hues that
// colour-blind readers tell apart (Okabe-Ito's, with Tol's wine for black); past eight they come
// round again, darker for devices 9-16, lighter for 17-24, then as at first.
QColor deviceColor(int position);
// The curve over all devices (the global loss, the total throughput).
QColor globalColor();
// "cpu:2" < "cpu:10" < "cuda:0": by kind, then by number, so that every panel puts the devices
// of a run in the same order and gives them the same colours.
bool deviceOrderLess(const QString& a, const QString& b);
// Inserts `device` into the naturally ordered `devices` (no duplicates); returns its position.
int insertDevice(QStringList& devices, const QString& device);

// What a timeline phase is, for its colour.
enum class PhaseFamily { forward, backward, weight_grad, compute, communication, idle, data_wait };
constexpr int kPhaseFamilyCount = 7;
// "forward", "backward" (a zero-bubble pipeline's B, "backward_input", too), its W
// ("backward_weight": weight_grad), the other compute phases (optimizer, clip, loss, server_update),
// communication (all_reduce_bucket, send_activation, push_grad, pull_weights, ...), waiting
// (wait_*, recv_*: a pipeline's receive is time spent waiting for the peer) and data_wait.
// An unknown phase that moved bytes is communication, else compute.
PhaseFamily phaseFamilyOf(const QString& phase, qint64 bytes = 0);
QString phaseFamilyName(PhaseFamily family);  // for legends: "forward", "communication", ...
QColor phaseFamilyColor(PhaseFamily family);

// The step-time breakdown (compute / communication / idle / data wait) uses the timeline's
// colours: compute is the forward colour.
QColor computeColor();

// MemCategory order (parameters, gradients, optimizer_state, activations, communication,
// workspace).
QColor memoryCategoryColor(int category);

}  // namespace paralab::ui::palette
