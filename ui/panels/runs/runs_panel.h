// The runs kept in the store: a table (filter, notes, delete, CSV) and, for the runs selected
// in it, a comparison — loss curves overlaid by step or wall time, throughput and peak memory
// side by side, and scaling efficiency against the single-device run of the same experiment.
// A strategy has one colour in every comparison. Every store query goes through RunsModel's
// worker thread; this panel only draws.
#pragma once

#include <QColor>
#include <QList>
#include <QVector>
#include <QWidget>

#include "ui/panels/common/plot_export.h"
#include "ui/session/runs_model.h"

class QCheckBox;
class QComboBox;
class QCPAxisRect;
class QCustomPlot;
class QLabel;
class QLineEdit;
class QPushButton;
class QSortFilterProxyModel;
class QDialog;
class QTableView;
class QTimer;

namespace paralab::ui {

class RunsPanel : public QWidget {
    Q_OBJECT
public:
    // The store at `storePath` (the default store when empty).
    explicit RunsPanel(const QString& storePath = {}, QWidget* parent = nullptr);

    // The colour of a strategy in every comparison (grey for one this build does not know).
    static QColor strategyColor(const QString& strategy);

    RunsModel* model() const { return m_model; }
    QSortFilterProxyModel* proxy() const;
    QTableView* table() const { return m_table; }

    void setFilterText(const QString& text);
    void selectRuns(const QList<qint64>& ids);
    QList<qint64> selectedRunIds() const;  // in the table's order
    // What the comparison shows now (it follows the selection once the curves are loaded:
    // comparisonUpdated).
    QList<qint64> comparedRunIds() const;
    int curvePointCount(qint64 runId) const;  // -1 when the run is not plotted
    QColor curveColor(qint64 runId) const;
    bool xAxisIsTime() const;
    void setXAxisIsTime(bool byTime);
    void setLogarithmicLoss(bool on);
    QString efficiencyText() const;
    QString messageText() const;  // the message bar ("" when hidden)

    // PNG or PDF by the suffix; false when the file cannot be written.
    bool exportPlot(const QString& path);
    // What the comparison draws, one row per point (series,x_axis,x,y_axis,y): each run's loss
    // curve as shown (smoothed or not, by step or time), its throughput, peak memory and scaling
    // efficiency bars.
    bool exportPlotCsv(const QString& path) const;
    QVector<PlotExport> plotExports();
    // The table's rows as shown (filtered and sorted), written on the model's worker:
    // model()->fileWritten reports the result.
    void exportTableCsv(const QString& path);

public slots:
    void refresh();
    void deleteSelected(bool confirm = true);
    void exportPlotWithDialog();  // PNG, PDF or CSV
    void exportTableWithDialog();
    void exportRunsWithDialog();  // hand-in: the selected runs into a new store file
    void importRunsWithDialog();

signals:
    void comparisonUpdated();
    // Resume… on a stopped, interrupted or failed run: the window continues it.
    void resumeRequested(qint64 runId);

private:
    void buildPlot();
    void scheduleComparison();
    void requestComparison();
    void showCurves(quint64 request, const QVector<LossCurve>& curves);
    void redraw();
    void showMessage(const QString& message);
    // The dialog of RunsModel::comparePlan's answer (one, reused).
    void showPlanBesideRun(qint64 id, const PlanBesideRun& c, const QString& error);

    RunsModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QLineEdit* m_filter;
    QLabel* m_message;
    QDialog* m_planDialog = nullptr;
    QTableView* m_table;
    QPushButton* m_deleteButton;
    QComboBox* m_xAxis;
    QCheckBox* m_smooth;
    QCheckBox* m_logLoss;
    QLabel* m_efficiency;
    QCustomPlot* m_plot;
    QCPAxisRect* m_lossRect = nullptr;
    QCPAxisRect* m_throughputRect = nullptr;
    QCPAxisRect* m_memoryRect = nullptr;
    QCPAxisRect* m_efficiencyRect = nullptr;
    QTimer* m_compareTimer;
    QList<qint64> m_keepSelection;  // across a reload of the table
    quint64 m_curveRequest = 0;     // the newest request; older answers are dropped
    QVector<LossCurve> m_curves;    // the runs compared, as loaded
    bool m_loadErrorShown = false;
    bool m_columnsFitted = false;
};

}  // namespace paralab::ui
