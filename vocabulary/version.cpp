#include "vocabulary/version.h"

namespace tandem {

std::string_view toolVersion() { return "tandem " TANDEM_PROJECT_VERSION; }

}  // namespace tandem
