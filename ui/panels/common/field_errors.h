// Which field an experiment parser message belongs to: messages start with the JSON path of
// the value ("strategy.split[1]: expected ..."); the field is the longest key that is a prefix
// of that path.
#pragma once

#include <QHash>
#include <QString>

namespace paralab::ui {

inline QString fieldOfMessage(const QString& message, const QStringList& keys) {
    const QString path = message.section(QLatin1Char(':'), 0, 0);
    QString best;
    for (const QString& key : keys) {
        if ((path == key || path.startsWith(key + QLatin1Char('[')) ||
             path.startsWith(key + QLatin1Char('.'))) &&
            key.size() > best.size())
            best = key;
    }
    return best;
}

}  // namespace paralab::ui
