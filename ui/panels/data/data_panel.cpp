#include "ui/panels/data/data_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QToolButton>
#include <QVBoxLayout>

#include "engine/data/dataset.h"
#include "engine/data/text.h"
#include "ui/panels/common/field_errors.h"
#include "ui/panels/common/form_widgets.h"

namespace paralab::ui {

namespace {

bool usesPath(const std::string& d) {
    return d == "mnist" || d == "fashion-mnist" || d == "csv" || d == "text";
}

// The text set has no default context length (the file must say it): the window offers one
// when the set is chosen.
constexpr int64_t kTextSeqLen = 64;

}  // namespace

DataPanel::DataPanel(QWidget* parent)
    : QWidget(parent),
      m_form(new QFormLayout),
      m_dataset(new QComboBox),
      m_path(new QLineEdit),
      m_pathRow(new QWidget),
      // Ranges are loose on purpose: the parser decides, and says why (0 is "all" for limits,
      // and a batch of 0 gets the parser's message rather than a silently clamped value).
      m_trainLimit(spinBox(0, 100000000, tr("all"))),
      m_testLimit(spinBox(0, 100000000, tr("all"))),
      m_batch(spinBox(0, 1000000)),
      m_workers(spinBox(0, 256, tr("none (load on the rank threads)"))),
      m_shuffle(new QCheckBox(tr("Shuffle every epoch"))),
      m_samples(spinBox(0, 100000000, tr("default"))),
      m_classes(spinBox(0, 1000, tr("default"))),
      m_noise(new QDoubleSpinBox),
      m_seqLen(spinBox(0, 100000, tr("default"))),
      m_features(spinBox(0, 100000, tr("default"))),
      m_labelColumn(new QLineEdit),
      m_testFraction(new QDoubleSpinBox),
      m_valFraction(new QDoubleSpinBox),
      m_generalError(new QLabel) {
    setObjectName(QStringLiteral("dataPanel"));
    for (const auto& name : data::dataset_names()) m_dataset->addItem(QString::fromStdString(name));
    m_dataset->setObjectName(QStringLiteral("dataset"));
    m_batch->setObjectName(QStringLiteral("batchSize"));
    m_path->setObjectName(QStringLiteral("dataPath"));
    m_seqLen->setObjectName(QStringLiteral("seqLen"));
    m_valFraction->setObjectName(QStringLiteral("valFraction"));
    m_noise->setRange(-1, 100);
    m_noise->setDecimals(3);
    m_noise->setSingleStep(0.05);
    m_noise->setSpecialValueText(tr("default"));
    m_testFraction->setRange(0, 1);
    m_testFraction->setDecimals(3);
    m_testFraction->setSingleStep(0.05);
    m_valFraction->setRange(0, 1);
    m_valFraction->setDecimals(3);
    m_valFraction->setSingleStep(0.05);
    m_labelColumn->setPlaceholderText(tr("the last column"));

    auto* pathLayout = new QHBoxLayout(m_pathRow);
    pathLayout->setContentsMargins(0, 0, 0, 0);
    auto* file = new QToolButton;
    file->setText(tr("File…"));
    file->setToolTip(tr("Choose a CSV file, or a text file for the text set"));
    auto* folder = new QToolButton;
    folder->setText(tr("Folder…"));
    folder->setToolTip(
        tr("Choose a folder of IDX files (MNIST format, gzip or plain), or of text files for the "
           "text set"));
    pathLayout->addWidget(m_path, 1);
    pathLayout->addWidget(file);
    pathLayout->addWidget(folder);
    connect(file, &QToolButton::clicked, this, &DataPanel::chooseFile);
    connect(folder, &QToolButton::clicked, this, &DataPanel::chooseFolder);

    auto* layout = new QVBoxLayout(this);
    auto* title =
        new QLabel(tr("<b>Data</b> — what one optimizer step reads. The batch is the "
                      "<i>global</i> batch: N data-parallel devices get about batch / N "
                      "rows each."));
    title->setWordWrap(true);
    layout->addWidget(title);
    layout->addLayout(m_form);
    addField(QStringLiteral("data.dataset"), tr("Data set"), m_dataset);
    addField(QStringLiteral("data.path"), tr("Path"), m_pathRow);
    addField(QStringLiteral("data.batch_size"), tr("Batch size"), m_batch);
    addField(QStringLiteral("data.train_limit"), tr("Training examples"), m_trainLimit);
    addField(QStringLiteral("data.test_limit"), tr("Test examples"), m_testLimit);
    addField(QStringLiteral("data.workers"), tr("Loader workers"), m_workers);
    addField(QStringLiteral("data.shuffle"), QString(), m_shuffle);
    addField(QStringLiteral("data.samples"), tr("Examples (synthetic)"), m_samples);
    addField(QStringLiteral("data.classes"), tr("Classes"), m_classes);
    addField(QStringLiteral("data.noise"), tr("Noise"), m_noise);
    addField(QStringLiteral("data.seq_len"), tr("Sequence length"), m_seqLen);
    addField(QStringLiteral("data.features"), tr("Features"), m_features);
    addField(QStringLiteral("data.label_column"), tr("Label column"), m_labelColumn);
    addField(QStringLiteral("data.test_fraction"), tr("Held out for test"), m_testFraction);
    addField(QStringLiteral("data.val_fraction"), tr("Held out for test (last bytes)"),
             m_valFraction);
    m_generalError->setWordWrap(true);
    m_generalError->setStyleSheet(QStringLiteral("color: #c0392b"));
    m_generalError->hide();
    layout->addWidget(m_generalError);
    layout->addStretch(1);

    connect(m_dataset, &QComboBox::currentTextChanged, this, [this] {
        updateVisibility();
        edited();
    });
    connect(m_path, &QLineEdit::editingFinished, this, &DataPanel::edited);
    connect(m_labelColumn, &QLineEdit::editingFinished, this, &DataPanel::edited);
    for (QSpinBox* box : {m_trainLimit, m_testLimit, m_batch, m_workers, m_samples, m_classes,
                          m_seqLen, m_features})
        connect(box, &QSpinBox::valueChanged, this, &DataPanel::edited);
    for (QDoubleSpinBox* box : {m_noise, m_testFraction, m_valFraction})
        connect(box, &QDoubleSpinBox::valueChanged, this, &DataPanel::edited);
    connect(m_shuffle, &QCheckBox::toggled, this, &DataPanel::edited);
    updateVisibility();
}

void DataPanel::addField(const QString& key, const QString& label, QWidget* editor) {
    QLabel* error = nullptr;
    QWidget* cell = addFieldRow(m_form, key, label, editor, &error);
    m_editors.insert(key, cell);
    m_errors.insert(key, error);
}

void DataPanel::updateVisibility() {
    const std::string d = m_dataset->currentText().toStdString();
    const bool synthetic = data::is_synthetic_dataset(d);
    auto show = [this](const char* key, bool visible) {
        m_form->setRowVisible(m_editors.value(QString::fromLatin1(key)), visible);
    };
    show("data.path", usesPath(d));
    show("data.samples", synthetic);
    show("data.noise", d == "spirals" || d == "blobs" || d == "sine" || d == "seqclass");
    show("data.classes", d == "spirals" || d == "blobs" || d == "seqclass");
    show("data.seq_len", d == "sine" || d == "seqclass" || d == "text");
    show("data.features", d == "blobs" || d == "seqclass");
    show("data.label_column", d == "csv");
    show("data.test_fraction", synthetic || d == "csv");
    show("data.val_fraction", d == "text");
    m_path->setPlaceholderText(d == "fashion-mnist"
                                   ? QStringLiteral("/usr/share/datasets/fashion-mnist")
                               : d == "mnist" ? QStringLiteral("/usr/share/datasets/mnist")
                               : d == "text"  ? QString::fromLatin1(data::kDefaultTextPath)
                                              : tr("a CSV file with a header row"));
}

void DataPanel::setExperiment(const config::Experiment& e) {
    m_updating = true;
    m_experiment = e;
    const auto& d = e.data;
    m_dataset->setCurrentText(QString::fromStdString(d.dataset));
    m_path->setText(QString::fromStdString(d.path));
    m_trainLimit->setValue(static_cast<int>(d.train_limit));
    m_testLimit->setValue(static_cast<int>(d.test_limit));
    m_batch->setValue(static_cast<int>(d.batch_size));
    m_workers->setValue(d.workers);
    m_shuffle->setChecked(d.shuffle);
    m_samples->setValue(static_cast<int>(d.samples));
    m_classes->setValue(static_cast<int>(d.classes));
    m_noise->setValue(d.noise < 0 ? -1 : d.noise);
    m_seqLen->setValue(static_cast<int>(d.seq_len));
    m_features->setValue(static_cast<int>(d.features));
    m_labelColumn->setText(QString::fromStdString(d.label_column));
    m_testFraction->setValue(d.test_fraction);
    m_valFraction->setValue(d.val_fraction);
    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();
    updateVisibility();
    m_updating = false;
}

void DataPanel::edited() {
    if (m_updating) return;
    config::Experiment e = m_experiment;
    auto& d = e.data;
    const std::string name = m_dataset->currentText().toStdString();
    const bool changedSet = name != d.dataset;
    d.dataset = name;
    d.path = usesPath(name) ? m_path->text().trimmed().toStdString() : std::string();
    d.train_limit = m_trainLimit->value();
    d.test_limit = m_testLimit->value();
    d.batch_size = m_batch->value();
    d.workers = m_workers->value();
    d.shuffle = m_shuffle->isChecked();
    // Options that do not apply to the chosen set are left at their defaults (the parser
    // refuses, say, seq_len for spirals); a new data set starts from its own defaults.
    const bool synthetic = data::is_synthetic_dataset(name);
    auto keep = [&](bool applies, auto value, auto none) {
        return applies && !changedSet ? value : none;
    };
    d.samples = keep(synthetic, int64_t{m_samples->value()}, int64_t{0});
    d.classes = keep(name == "spirals" || name == "blobs" || name == "seqclass",
                     int64_t{m_classes->value()}, int64_t{0});
    d.noise = keep(synthetic, m_noise->value() < 0 ? -1.0 : m_noise->value(), -1.0);
    d.seq_len = name == "text" && changedSet
                    ? kTextSeqLen
                    : keep(name == "sine" || name == "seqclass" || name == "text",
                           int64_t{m_seqLen->value()}, int64_t{0});
    d.features =
        keep(name == "blobs" || name == "seqclass", int64_t{m_features->value()}, int64_t{0});
    d.label_column = name == "csv" ? m_labelColumn->text().trimmed().toStdString() : std::string();
    d.test_fraction = (synthetic || name == "csv") && !changedSet ? m_testFraction->value() : 0.2;
    d.val_fraction = name == "text" && !changedSet ? m_valFraction->value() : 0.1;

    for (QLabel* l : std::as_const(m_errors)) l->hide();
    m_generalError->hide();
    if (const auto issues = run::validate(e); !issues.empty()) {
        showIssue(issues.front(), m_errors, m_generalError);
        emit editRefused(QString::fromStdString(issues.front().text()));
        return;
    }
    // The files are checked as they are named, not at Start: there, readable, with the header
    // their format needs (headers and sizes only: nothing is loaded).
    if (usesPath(name) && (changedSet || d.path != m_experiment.data.path)) {
        try {
            data::check_data_files(d);
        } catch (const std::exception& err) {
            const config::Issue issue{"data.path", err.what()};
            showIssue(issue, m_errors, m_generalError);
            emit editRefused(QString::fromStdString(issue.text()));
            return;
        }
    }
    if (changedSet) setExperiment(e);  // shows the new set's defaults
    m_experiment = e;
    emit experimentEdited(e);
}

QString DataPanel::errorText() const {
    for (QLabel* l : m_errors)
        if (!l->isHidden()) return l->text();
    return m_generalError->isHidden() ? QString() : m_generalError->text();
}

void DataPanel::chooseFile() {
    const QString path = QFileDialog::getOpenFileName(this, tr("CSV data file"), m_path->text(),
                                                      tr("CSV files (*.csv);;All files (*)"));
    if (path.isEmpty()) return;
    m_path->setText(path);
    const QString set = m_dataset->currentText();
    if (set != QLatin1String("csv") && set != QLatin1String("text"))
        m_dataset->setCurrentText(QStringLiteral("csv"));
    else
        edited();
}

void DataPanel::chooseFolder() {
    const QString path =
        QFileDialog::getExistingDirectory(this, tr("Folder of IDX files"), m_path->text());
    if (path.isEmpty()) return;
    m_path->setText(path);
    if (m_dataset->currentText() == QLatin1String("csv"))
        m_dataset->setCurrentText(QStringLiteral("fashion-mnist"));
    else
        edited();
}

}  // namespace paralab::ui
