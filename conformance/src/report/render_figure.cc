// The demo's figure (Fig. 9.5 of the tool-sandbox document) as inline SVG, drawn from
// report.json: one row per task — what the command tried, what it got, the revert time that
// followed and the files left in /work — with refused or failed rows marked in rose, plus the
// check's outcome at the right.
#include <fmt/format.h>

#include "report/render.h"

namespace sandcheck {
namespace {

using nlohmann::json;

constexpr int kWidth = 980;
constexpr int kRowHeight = 40;
constexpr int kHeaderY = 84;
constexpr const char* kRose = "#be123c";
constexpr const char* kRoseFill = "#fde8ec";
constexpr const char* kInk = "#111827";
constexpr const char* kGrey = "#6b7280";

std::string Cut(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
    --cut;  // not mid-character
  return s.substr(0, cut) + "\u2026";
}

const char* OutcomeColour(const std::string& o) {
  if (o == "pass") return "#15803d";
  if (o == "fail" || o == "xpass") return kRose;
  if (o == "xfail") return "#b45309";
  if (o == "error") return "#7c3aed";
  return kGrey;
}

std::string LimitsText(const json& request) {
  std::vector<std::string> parts;
  if (!request.is_object()) return "";
  const json limits = request.value("limits", json::object());
  if (limits.contains("cpu_millicores"))
    parts.push_back(fmt::format("{} millicores", limits["cpu_millicores"].get<int64_t>()));
  if (limits.contains("memory_bytes"))
    parts.push_back(fmt::format("{} MiB", limits["memory_bytes"].get<int64_t>() >> 20));
  for (const auto& r : request.value("egress", json::object()).value("rules", json::array())) {
    for (const auto& h : r.value("hosts", json::array())) {
      for (const auto& p : r.value("ports", json::array())) {
        parts.push_back(
            fmt::format("egress {} {}:{}", r.value("kind", ""), h.get<std::string>(), p.dump()));
      }
    }
  }
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : " \u00b7 ") + p;
  return out;
}

}  // namespace

std::string RenderTaskFigureSvg(const json& report, const json& scenario) {
  const json& tasks = scenario["tasks"];
  int rows = static_cast<int>(tasks.size());
  int height = kHeaderY + 10 + rows * kRowHeight + 48;
  const json& target = report["target"];
  std::string name = scenario["name"];
  std::string title = scenario.value("title", name);
  const json& sandbox = scenario.contains("sandbox") && scenario["sandbox"].is_object()
                            ? scenario["sandbox"]
                            : json::object();
  json request = sandbox.contains("request") ? sandbox["request"] : json();
  std::string subtitle = fmt::format("{} {} \u00b7 {}", target.value("name", ""),
                                     target.value("version", ""), LimitsText(request));
  std::string desc;
  std::string svg;
  svg += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" viewBox=\"0 0 {0} {1}\" "
      "width=\"{0}\" height=\"{1}\" "
      "font-family=\"Helvetica, Arial, sans-serif\" aria-labelledby=\"fig-{2}-title "
      "fig-{2}-desc\">\n",
      kWidth, height, XmlEscape(name));
  svg += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                     kWidth, height);
  svg += fmt::format(
      "<text x=\"20\" y=\"28\" font-size=\"16\" font-weight=\"bold\" fill=\"{}\">{}</text>\n", kInk,
      XmlEscape(title));
  svg += fmt::format("<text x=\"20\" y=\"50\" font-size=\"12\" fill=\"{}\">{}</text>\n", kGrey,
                     XmlEscape(subtitle));
  struct Col {
    int x;
    const char* label;
  };
  const Col cols[] = {{32, "THE COMMAND TRIES"},
                      {290, "WHAT IT GETS"},
                      {660, "REVERT"},
                      {760, "FILES IN /WORK"},
                      {890, "CHECK"}};
  for (const auto& c : cols) {
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" font-size=\"11\" letter-spacing=\"1\" fill=\"{}\">{}</text>\n",
        c.x, kHeaderY, kGrey, XmlEscape(c.label));
  }
  int top = kHeaderY + 10;
  svg += fmt::format(
      "<line x1=\"20\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"{2}\" stroke-width=\"1.5\"/>\n",
      top, kWidth - 20, kInk);
  for (int i = 0; i < rows; ++i) {
    const json& t = tasks[i];
    int y = top + i * kRowHeight;
    bool refused = t.value("refused", false);
    std::string tries = t.value("tries", ""), got = t.value("got", "");
    const json& timings = t["timings"];
    std::string revert = FormatSeconds(timings.value("revert_seconds", json()));
    json files = t.value("files_after", json());
    std::string files_text = files.is_number() ? files.dump() : "-";
    const json* check = CheckForTask(report, name, t.value("id", ""));
    std::string outcome = check ? check->value("outcome", "") : "";
    if (refused) {
      svg += fmt::format("<rect x=\"20\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", y,
                         kWidth - 40, kRowHeight, kRoseFill);
      svg += fmt::format("<rect x=\"20\" y=\"{}\" width=\"4\" height=\"{}\" fill=\"{}\"/>\n", y,
                         kRowHeight, kRose);
    }
    int base = y + 25;
    svg += fmt::format("<text x=\"32\" y=\"{}\" font-size=\"14\" fill=\"{}\">{}</text>\n", base,
                       kInk, XmlEscape(Cut(tries, 34)));
    svg += fmt::format("<text x=\"290\" y=\"{}\" font-size=\"14\" fill=\"{}\">{}</text>\n", base,
                       refused ? kRose : kInk, XmlEscape(Cut(got, 50)));
    svg += fmt::format(
        "<text x=\"660\" y=\"{}\" font-size=\"13\" font-family=\"monospace\" "
        "fill=\"{}\">{}</text>\n",
        base, kInk, XmlEscape(revert));
    bool dirty = files.is_number() && files.get<int64_t>() != 0;
    svg += fmt::format(
        "<text x=\"760\" y=\"{}\" font-size=\"13\" font-family=\"monospace\" "
        "fill=\"{}\"{}>{}</text>\n",
        base, dirty ? kRose : kInk, dirty ? " font-weight=\"bold\"" : "", XmlEscape(files_text));
    svg += fmt::format(
        "<text x=\"890\" y=\"{}\" font-size=\"13\" font-weight=\"bold\" fill=\"{}\">{}</text>\n",
        base, OutcomeColour(outcome), XmlEscape(outcome));
    svg += fmt::format("<line x1=\"20\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#e5e7eb\"/>\n",
                       y + kRowHeight, kWidth - 20);
    desc += fmt::format("{}: {}, revert {}, {} files after it. ", tries, got, revert, files_text);
  }
  svg += fmt::format(
      "<text x=\"20\" y=\"{}\" font-size=\"12\" fill=\"{}\">Read left to right. Each row is one "
      "task, "
      "the result the command saw, and the time of the revert that followed. Rose marks a refused "
      "or "
      "failed task.</text>\n",
      top + rows * kRowHeight + 28, kGrey);
  svg += fmt::format("<title id=\"fig-{}-title\">{}</title>\n<desc id=\"fig-{}-desc\">{}</desc>\n",
                     XmlEscape(name), XmlEscape(title), XmlEscape(name), XmlEscape(desc));
  svg += "</svg>\n";
  return svg;
}

}  // namespace sandcheck
