#pragma once
// line_plot: a small SVG line chart for the benchmarks' figures
// (docs/performance.md), so they need no plotting library.
#include <string>
#include <vector>

namespace sinkgraph::bench {

struct PlotSeries {
  std::string label;
  std::vector<double> x, y;  // one point each; y <= 0 or NaN points are skipped
};

struct PlotAxes {
  std::string title, x_label, y_label;
  // x on a log2 axis, ticked at every x of the series (batch sizes); else a
  // linear axis from 0 with five ticks.
  bool log2_x = false;
  // Scale y to the 1st..99th percentile of the points, so one outlier does
  // not flatten the rest (long per-position series).
  bool clip_outliers = false;
  bool markers = false;  // a dot at every point
};

// The chart: series in a fixed palette with a legend at the right. The y axis
// starts at 0, or is logarithmic when the values span more than 8x (so fast
// and slow columns both stay readable); its label says so.
std::string line_plot(const PlotAxes& axes, const std::vector<PlotSeries>& series);

}  // namespace sinkgraph::bench
