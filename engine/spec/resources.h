#pragma once
// Files that come with tandem (resources/: jobs, topologies, calibrations),
// found from wherever a command runs: a name given by the user is taken as
// a path when it exists, and looked up in the resource folder otherwise.

#include <string>

namespace tandem {

// The resources/ folder this build was configured with.
std::string resourceDir();

// `name_or_path` when it exists as given, else resourceDir()/name_or_path
// when that exists, else `name_or_path` unchanged (the caller's error then
// names what the user typed).
std::string resourcePath(const std::string& name_or_path);

}  // namespace tandem
