#include "scenario/coverage_notes.h"

#include <fmt/format.h>

#include "common/json_strict.h"
#include "scenario/catalog.h"
#include "scenario/embedded.h"

namespace sandcheck {

sbx::StatusOr<std::vector<CoverageNote>> ParseCoverageNotes(std::string_view text,
                                                            const std::string& origin) {
  ASSIGN_OR_RETURN(json j, ParseJsonText(text, origin));
  auto wrap = [&](const sbx::Status& st) {
    return sbx::InvalidArgument(fmt::format("{}: {}", origin, st.message()));
  };
  ObjectReader r(j, "");
  r.String("description", "");
  const json* notes = r.Object("notes", Required::kYes);
  if (sbx::Status st = r.Finish(); !st.ok()) return wrap(st);
  std::vector<CoverageNote> out;
  for (auto it = notes->begin(); it != notes->end(); ++it) {
    std::string path = "notes." + it.key();
    ObjectReader nr(*it, path);
    CoverageNote n;
    n.id = it.key();
    n.how = nr.String("how", "", Required::kYes);
    n.why_not_black_box = nr.String("why_not_black_box", "", Required::kYes);
    n.partial = nr.Bool("partial", false);
    if (sbx::Status st = nr.Finish(); !st.ok()) return wrap(st);
    if (!IsKnownRequirement(n.id)) {
      return wrap(sbx::InvalidArgument(
          fmt::format("{}: '{}' is not in the requirement catalogue", path, n.id)));
    }
    if (n.how.empty() || n.why_not_black_box.empty()) {
      return wrap(sbx::InvalidArgument(
          fmt::format("{}: say how it is verified and why no black-box check can", path)));
    }
    out.push_back(std::move(n));
  }
  return out;
}

sbx::StatusOr<std::vector<CoverageNote>> BuiltinCoverageNotes() {
  auto data = FindEmbedded("conformance/coverage_notes.json");
  if (!data) return sbx::NotFound("conformance/coverage_notes.json is not built in");
  return ParseCoverageNotes(*data, "embedded:conformance/coverage_notes.json");
}

}  // namespace sandcheck
