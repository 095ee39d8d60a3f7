// Version and commit of this build, for provenance blocks and benchmark records. The commit lives in one
// generated translation unit so a new commit recompiles one file, not every module.
#pragma once

namespace gridq {
const char* version_string();  // e.g. "0.1.0"
const char* git_commit();      // short hash of HEAD at configure time, or "unknown"
}  // namespace gridq
