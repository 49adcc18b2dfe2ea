#include "engine/config/options.h"

namespace paralab::config {

const char* option_kind_name(OptionKind kind) {
    switch (kind) {
        case OptionKind::boolean: return "boolean";
        case OptionKind::integer: return "integer";
        case OptionKind::number: return "number";
        case OptionKind::choice: return "string";
        case OptionKind::index_list: return "array of layer indices";
    }
    return "?";
}

}  // namespace paralab::config
