#include "report/chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/stats.h"
#include "report/render.h"

namespace sandcheck {
namespace {

constexpr int kW = 760, kH = 380;
constexpr int kLeft = 70, kRight = 230, kTop = 46, kBottom = 52;
constexpr const char* kPalette[] = {"#1d4ed8", "#be123c", "#15803d", "#b45309", "#7c3aed",
                                    "#0e7490", "#a21caf", "#ea580c", "#0f766e", "#334155"};
constexpr const char* kGrey = "#6b7280";
constexpr const char* kInk = "#111827";

const char* Colour(size_t i) { return kPalette[i % (sizeof kPalette / sizeof kPalette[0])]; }

std::string Num(double v) {
  if (v == 0) return "0";
  double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3g}", v);
}

// "Nice" linear ticks covering [lo, hi].
std::vector<double> LinearTicks(double lo, double hi, int want = 5) {
  if (hi <= lo) hi = lo + 1;
  double raw = (hi - lo) / want;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> t;
  for (double v = std::floor(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string Header(const std::string& title, int w, int h) {
  return fmt::format(
             "<svg xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" viewBox=\"0 0 {0} {1}\" "
             "width=\"{0}\" height=\"{1}\" font-family=\"Helvetica, Arial, sans-serif\">\n",
             w, h) +
         fmt::format("<title>{}</title>\n<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                     XmlEscape(title), w, h) +
         fmt::format(
             "<text x=\"{}\" y=\"24\" font-size=\"14\" font-weight=\"bold\" "
             "fill=\"{}\">{}</text>\n",
             kLeft, kInk, XmlEscape(title));
}

std::string Text(double x, double y, const std::string& s, int size = 11,
                 const char* anchor = "start", const char* fill = kGrey) {
  return fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\" text-anchor=\"{}\" "
      "fill=\"{}\">{}</text>\n",
      x, y, size, anchor, fill, XmlEscape(s));
}

std::string Legend(const std::vector<std::string>& labels,
                   const std::vector<std::string>& colours = {}) {
  std::string out;
  double x = kW - kRight + 16, y = kTop + 6;
  for (size_t i = 0; i < labels.size(); ++i) {
    out += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"12\" height=\"3\" fill=\"{}\"/>\n",
                       x, y + i * 34 - 4, i < colours.size() ? colours[i] : Colour(i));
    std::string l = labels[i];
    size_t nl = l.find('\n');
    out +=
        Text(x + 18, y + i * 34, nl == std::string::npos ? l : l.substr(0, nl), 11, "start", kInk);
    if (nl != std::string::npos) out += Text(x + 18, y + i * 34 + 13, l.substr(nl + 1), 10);
  }
  return out;
}

struct Axis {
  double lo, hi;
  bool log;
  double px0, px1;  // pixel range
  double Map(double v) const {
    double f = log ? (std::log(std::max(v, lo)) - std::log(lo)) / (std::log(hi) - std::log(lo))
                   : (v - lo) / (hi - lo);
    return px0 + f * (px1 - px0);
  }
};

std::vector<double> LogTicks(double lo, double hi) {
  std::vector<double> t;
  for (double d = std::pow(10.0, std::floor(std::log10(lo))); d <= hi * 1.0001; d *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      double v = d * m;
      if (v >= lo * 0.9999 && v <= hi * 1.0001) t.push_back(v);
    }
  }
  return t;
}

}  // namespace

std::string RenderCdfSvg(const std::string& title, const std::vector<CdfSeries>& series,
                         double limit_s) {
  double lo = 1e300, hi = 0;
  for (const auto& s : series) {
    for (double v : s.samples) {
      lo = std::min(lo, v * 1e3);
      hi = std::max(hi, v * 1e3);
    }
  }
  if (limit_s > 0) hi = std::max(hi, limit_s * 1e3 * 1.05);
  if (hi <= 0 || lo > hi) {
    lo = 0;
    hi = 1;
  }
  bool log = lo > 0 && hi / lo > 20;
  if (log) {
    lo = lo / 1.1;
    hi = hi * 1.1;
  } else {
    lo = 0;
    hi = hi * 1.05;
  }
  Axis x{lo, hi, log, static_cast<double>(kLeft), static_cast<double>(kW - kRight)};
  Axis y{0, 1, false, static_cast<double>(kH - kBottom), static_cast<double>(kTop)};
  std::string svg = Header(title, kW, kH);
  // Grid and axes.
  for (double f : {0.0, 0.25, 0.5, 0.75, 0.95, 1.0}) {
    double py = y.Map(f);
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-dasharray=\"{}\"/>\n",
        kLeft, py, kW - kRight, py, f == 0.95 ? "#9ca3af" : "#e5e7eb", f == 0.95 ? "4 3" : "none");
    svg += Text(kLeft - 6, py + 4, f == 0.95 ? "p95" : Num(f), 10, "end");
  }
  for (double v : log ? LogTicks(lo, hi) : LinearTicks(lo, hi)) {
    if (v < lo || v > hi) continue;
    double px = x.Map(v);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" "
        "stroke=\"#f3f4f6\"/>\n",
        px, kTop, kH - kBottom);
    svg += Text(px, kH - kBottom + 16, Num(v), 10, "middle");
  }
  svg += Text((kLeft + kW - kRight) / 2.0, kH - 14,
              std::string("latency, ms") + (log ? " (log scale)" : ""), 11, "middle");
  svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" "
      "stroke=\"{}\"/>\n",
      kLeft, kTop, kW - kRight - kLeft, kH - kBottom - kTop, "#d1d5db");
  if (limit_s > 0) {
    double px = x.Map(limit_s * 1e3);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"{3}\" "
        "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n",
        px, kTop, kH - kBottom, "#be123c");
    svg += Text(px - 4, kTop + 12, "limit " + FormatSeconds(limit_s), 10, "end", "#be123c");
  }
  std::vector<std::string> labels, colours;
  size_t colour = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    std::vector<double> v = series[i].samples;
    std::sort(v.begin(), v.end());
    if (v.empty()) continue;
    std::string c = series[i].reference ? "#6b7280" : Colour(colour++);
    std::string pts;
    double n = static_cast<double>(v.size());
    double prev_y = y.Map(0);
    pts += fmt::format("{:.1f},{:.1f} ", x.Map(v[0] * 1e3), prev_y);
    for (size_t k = 0; k < v.size(); ++k) {
      double px = x.Map(v[k] * 1e3);
      double py = y.Map(static_cast<double>(k + 1) / n);
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", px, prev_y, px, py);
      prev_y = py;
    }
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.6\"{}/>\n", pts, c,
        series[i].reference ? " stroke-dasharray=\"5 3\"" : "");
    colours.push_back(c);
    labels.push_back(fmt::format("{}\np50 {} · p95 {} · n={}", series[i].label,
                                 FormatSeconds(Percentile(v, 50)), FormatSeconds(Percentile(v, 95)),
                                 v.size()));
  }
  svg += Legend(labels, colours);
  svg += "</svg>\n";
  return svg;
}

std::string RenderBarChartSvg(const std::string& title, const std::string& y_label,
                              const std::vector<std::string>& groups,
                              const std::vector<BarSeries>& series) {
  double hi = 0;
  for (const auto& s : series) {
    for (double v : s.value) hi = std::max(hi, v);
    for (double v : s.hi) hi = std::max(hi, v);
  }
  auto ticks = LinearTicks(0, hi > 0 ? hi : 1);
  double top = ticks.back();
  Axis y{0, top, false, static_cast<double>(kH - kBottom), static_cast<double>(kTop)};
  std::string svg = Header(title, kW, kH);
  for (double v : ticks) {
    double py = y.Map(v);
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" "
        "stroke=\"#e5e7eb\"/>\n",
        kLeft, py, kW - kRight, py);
    svg += Text(kLeft - 6, py + 4, Num(v), 10, "end");
  }
  svg += fmt::format(
      "<text x=\"16\" y=\"{:.1f}\" font-size=\"11\" fill=\"{}\" "
      "transform=\"rotate(-90 16 {:.1f})\" text-anchor=\"middle\">{}</text>\n",
      (kTop + kH - kBottom) / 2.0, kGrey, (kTop + kH - kBottom) / 2.0, XmlEscape(y_label));
  double span = static_cast<double>(kW - kRight - kLeft);
  double gw = groups.empty() ? span : span / static_cast<double>(groups.size());
  double bw = series.empty() ? 0 : std::min(40.0, gw * 0.7 / static_cast<double>(series.size()));
  for (size_t g = 0; g < groups.size(); ++g) {
    double gx = kLeft + gw * static_cast<double>(g);
    double x0 = gx + (gw - bw * static_cast<double>(series.size())) / 2;
    for (size_t s = 0; s < series.size(); ++s) {
      if (g >= series[s].value.size()) continue;
      double v = series[s].value[g];
      double bx = x0 + bw * static_cast<double>(s);
      svg += fmt::format(
          "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" "
          "fill=\"{}\" fill-opacity=\"0.8\"/>\n",
          bx + 2, y.Map(v), bw - 4, y.Map(0) - y.Map(v), Colour(s));
      if (g < series[s].lo.size() && g < series[s].hi.size()) {
        double cx = bx + bw / 2;
        svg += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
            "stroke=\"{3}\" stroke-width=\"1.5\"/>\n",
            cx, y.Map(series[s].lo[g]), y.Map(series[s].hi[g]), kInk);
      }
      svg += Text(bx + bw / 2, y.Map(v) - 4, Num(v), 9, "middle", kInk);
    }
    svg += Text(gx + gw / 2, kH - kBottom + 18, groups[g], 11, "middle", kInk);
  }
  std::vector<std::string> labels;
  for (const auto& s : series) labels.push_back(s.label);
  svg += Legend(labels);
  svg += "</svg>\n";
  return svg;
}

std::string RenderLineChartSvg(const std::string& title, const std::string& x_label,
                               const std::string& y_label, const std::vector<double>& xs,
                               const std::vector<LineSeries>& series, bool log_x) {
  double xlo = 1e300, xhi = 0, yhi = 0;
  for (double v : xs) {
    xlo = std::min(xlo, v);
    xhi = std::max(xhi, v);
  }
  for (const auto& s : series) {
    for (double v : s.y) yhi = std::max(yhi, v);
    for (double v : s.hi) yhi = std::max(yhi, v);
  }
  if (xs.empty() || xhi <= xlo) {
    xlo = xs.empty() ? 1 : xlo / 2;
    xhi = xs.empty() ? 2 : xhi * 2;
  }
  bool log = log_x && xlo > 0;
  Axis x{log ? xlo / 1.3 : 0, log ? xhi * 1.3 : xhi * 1.05, log, static_cast<double>(kLeft),
         static_cast<double>(kW - kRight)};
  auto yt = LinearTicks(0, yhi > 0 ? yhi : 1);
  Axis y{0, yt.back(), false, static_cast<double>(kH - kBottom), static_cast<double>(kTop)};
  std::string svg = Header(title, kW, kH);
  for (double v : yt) {
    double py = y.Map(v);
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" "
        "stroke=\"#e5e7eb\"/>\n",
        kLeft, py, kW - kRight, py);
    svg += Text(kLeft - 6, py + 4, Num(v), 10, "end");
  }
  for (double v : xs) svg += Text(x.Map(v), kH - kBottom + 16, Num(v), 10, "middle");
  svg += Text((kLeft + kW - kRight) / 2.0, kH - 14, x_label, 11, "middle");
  svg += fmt::format(
      "<text x=\"16\" y=\"{:.1f}\" font-size=\"11\" fill=\"{}\" "
      "transform=\"rotate(-90 16 {:.1f})\" text-anchor=\"middle\">{}</text>\n",
      (kTop + kH - kBottom) / 2.0, kGrey, (kTop + kH - kBottom) / 2.0, XmlEscape(y_label));
  for (size_t i = 0; i < series.size(); ++i) {
    const LineSeries& s = series[i];
    std::string pts;
    for (size_t k = 0; k < s.y.size() && k < xs.size(); ++k) {
      double px = x.Map(xs[k]), py = y.Map(s.y[k]);
      pts += fmt::format("{:.1f},{:.1f} ", px, py);
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px, py,
                         Colour(i));
      if (k < s.lo.size() && k < s.hi.size()) {
        svg += fmt::format(
            "<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" "
            "stroke=\"{3}\"/>\n",
            px, y.Map(s.lo[k]), y.Map(s.hi[k]), Colour(i));
      }
    }
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"1.6\"/>\n",
        pts, Colour(i));
  }
  std::vector<std::string> labels;
  for (const auto& s : series) labels.push_back(s.label);
  svg += Legend(labels);
  svg += "</svg>\n";
  return svg;
}

}  // namespace sandcheck
