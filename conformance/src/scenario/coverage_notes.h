// Coverage notes (conformance/coverage_notes.json, embedded): for requirement IDs that a
// black-box check through adapter protocol v1 cannot reach — in whole, or in part ("partial") —
// how they are verified instead and why sandcheck cannot check them against any target.
// `sandcheck coverage` shows a note next to the checks or in place of them; an ID with neither
// is a gap. A note explains; it is never counted as a pass.
//
// Thread-safety: values; the embedded notes are loaded once.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sbx/status.h"

namespace sandcheck {

struct CoverageNote {
  std::string id;   // a requirement ID of the catalogue
  std::string how;  // what verifies it instead (tests, measurements, other checks)
  std::string why_not_black_box;
  bool partial = false;  // checks cover part of the ID; the note is about the rest
};

// Parses a notes document. Strict: unknown keys, an ID outside the catalogue, or an empty
// "how" / "why_not_black_box" are kInvalidArgument naming the key.
sbx::StatusOr<std::vector<CoverageNote>> ParseCoverageNotes(std::string_view text,
                                                            const std::string& origin);

// The embedded conformance/coverage_notes.json (an error if it is missing or malformed).
sbx::StatusOr<std::vector<CoverageNote>> BuiltinCoverageNotes();

}  // namespace sandcheck
