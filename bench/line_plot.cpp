#include "line_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace sinkgraph::bench {

std::string line_plot(const PlotAxes& axes, const std::vector<PlotSeries>& series) {
  constexpr double kW = 760, kH = 420, kL = 70, kR = 200, kT = 40, kB = 50;
  const auto usable = [](double v) { return std::isfinite(v) && v > 0; };
  double ymin = std::numeric_limits<double>::infinity(), ymax = 0;
  double xmin = std::numeric_limits<double>::infinity(), xmax = 0;
  std::set<double> xs;
  for (const PlotSeries& s : series) {
    std::vector<double> ys;
    for (std::size_t i = 0; i < s.y.size() && i < s.x.size(); ++i) {
      if (!usable(s.y[i])) continue;
      ys.push_back(s.y[i]);
      xs.insert(s.x[i]);
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
    }
    if (ys.empty()) continue;
    std::sort(ys.begin(), ys.end());
    const std::size_t lo = axes.clip_outliers ? ys.size() / 100 : 0;
    const std::size_t hi = axes.clip_outliers ? ys.size() * 99 / 100 : ys.size() - 1;
    ymin = std::min(ymin, ys[lo]);
    ymax = std::max(ymax, ys[hi]);
  }
  if (!(ymax > 0)) ymax = 1;
  ymax *= 1.1;
  ymin = std::isfinite(ymin) ? ymin / 1.1 : ymax / 10;
  const bool log_y = ymax / ymin > 8;
  if (!log_y) ymin = 0;
  if (axes.log2_x) {
    if (!(xmin > 0)) xmin = 1;
    if (!(xmax > xmin)) xmax = xmin * 2;
  } else {
    xmin = 0;
    if (!(xmax > 0)) xmax = 1;
  }
  const double pw = kW - kL - kR, ph = kH - kT - kB;
  const auto x_of = [&](double v) {
    const double f =
        axes.log2_x ? std::log2(v / xmin) / std::log2(xmax / xmin) : (v - xmin) / (xmax - xmin);
    return kL + pw * f;
  };
  const auto y_of = [&](double v) {
    v = std::clamp(v, log_y ? ymin : 0.0, ymax);
    const double f = log_y ? std::log(v / ymin) / std::log(ymax / ymin) : v / ymax;
    return kT + ph - ph * f;
  };
  std::vector<double> yticks;
  if (log_y) {  // 1, 2, 5 times powers of ten
    for (double decade = std::pow(10.0, std::floor(std::log10(ymin))); decade <= ymax;
         decade *= 10) {
      for (const double m : {1.0, 2.0, 5.0}) {
        if (m * decade >= ymin && m * decade <= ymax) yticks.push_back(m * decade);
      }
    }
  } else {
    for (int i = 0; i <= 4; ++i) yticks.push_back(ymax * i / 4);
  }
  std::vector<double> xticks;
  if (axes.log2_x) {
    xticks.assign(xs.begin(), xs.end());
  } else {
    for (int i = 0; i <= 4; ++i) xticks.push_back(xmax * i / 4);
  }

  const char* colors[] = {"#222222", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"};
  std::ostringstream out;
  out << fmt::format(
      R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)svg"
      "\n",
      kW, kH);
  out << fmt::format(R"svg(<rect width="{}" height="{}" fill="white"/>)svg"
                     "\n",
                     kW, kH);
  out << fmt::format(R"svg(<text x="{}" y="22" font-size="14">{}</text>)svg"
                     "\n",
                     kL, axes.title);
  out << fmt::format(
      R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)svg"
      "\n",
      kL, kT, pw, ph);
  for (const double v : yticks) {
    const double y = y_of(v);
    out << fmt::format(R"svg(<text x="{}" y="{}" text-anchor="end">{:.0f}</text>)svg"
                       "\n",
                       kL - 6, y + 4, v);
    out << fmt::format(R"svg(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#eee"/>)svg"
                       "\n",
                       kL, y, kL + pw, y);
  }
  double last_label = -1e9;
  for (const double v : xticks) {
    const double x = x_of(v);
    if (x - last_label < 20) continue;  // would overlap the previous label (16 beside 17)
    last_label = x;
    out << fmt::format(R"svg(<text x="{:.1f}" y="{}" text-anchor="middle">{:.0f}</text>)svg"
                       "\n",
                       x, kT + ph + 18, v);
  }
  out << fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle">{}</text>)svg"
                     "\n",
                     kL + pw / 2, kH - 10, axes.x_label);
  out << fmt::format(
      R"svg(<text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">{}{}</text>)svg"
      "\n",
      kT + ph / 2, kT + ph / 2, axes.y_label, log_y ? " (log scale)" : "");
  for (std::size_t c = 0; c < series.size(); ++c) {
    const PlotSeries& s = series[c];
    const char* color = colors[c % 6];
    std::string points;
    for (std::size_t i = 0; i < s.y.size() && i < s.x.size(); ++i) {
      if (!usable(s.y[i])) continue;
      const double x = x_of(s.x[i]), y = y_of(s.y[i]);
      points += fmt::format("{:.1f},{:.1f} ", x, y);
      if (axes.markers) {
        out << fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)svg"
                           "\n",
                           x, y, color);
      }
    }
    out << fmt::format(R"svg(<polyline fill="none" stroke="{}" stroke-width="1.2" points="{}"/>)svg"
                       "\n",
                       color, points);
    const double ly = kT + 16 + 18 * static_cast<double>(c);
    out << fmt::format(
        R"svg(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="3"/>)svg"
        "\n",
        kL + pw + 12, ly - 4, kL + pw + 32, ly - 4, color);
    out << fmt::format(R"svg(<text x="{}" y="{}">{}</text>)svg"
                       "\n",
                       kL + pw + 38, ly, s.label);
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace sinkgraph::bench
