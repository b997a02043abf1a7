#include "model/plan/timeline_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace strata {

namespace {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `n` ticks over `range`.
double tick_step(double range, int n) {
  if (!(range > 0)) return 1;
  double raw = range / n, p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

}  // namespace

std::string timeline_svg(const Forecast& f, const std::string& title, size_t budget) {
  const double W = 960, H = 430, left = 90, right = 30, top = 60, bottom = 60;
  const double pw = W - left - right, ph = H - top - bottom;
  const double gib = double(size_t(1) << 30);
  const double t_end = std::max(f.step_s, 1e-9);
  const double y_max = 1.08 * double(std::max({f.peak_bytes, budget, f.persistent_bytes, size_t(1)}));
  auto X = [&](double t) { return left + pw * std::clamp(t / t_end, 0.0, 1.0); };
  auto Y = [&](double bytes) { return top + ph * (1.0 - bytes / y_max); };

  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      W, H, W, H);
  // The title: its first line large, the rest (the plan) small, each cut to the width.
  size_t start = 0;
  for (int line = 0; start <= title.size() && line < 3; ++line) {
    size_t nl = title.find('\n', start);
    std::string text = title.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const size_t max_chars = line == 0 ? 110 : 150;
    if (text.size() > max_chars) text = text.substr(0, max_chars - 3) + "...";
    s += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"{}\">{}</text>\n", left, line == 0 ? 20 : 20 + 15 * line,
                     line == 0 ? 15 : 11, escape(text));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  // Phases.
  struct Phase {
    const char* name;
    double t0, t1;
    const char* fill;
  };
  const Phase phases[] = {{"forward", 0, f.forward_s, "#e8f0fe"},
                          {"backward", f.forward_s, f.forward_s + f.backward_s, "#fdecea"},
                          {"optimizer", f.forward_s + f.backward_s, f.step_s, "#e6f4ea"}};
  for (auto& p : phases) {
    if (p.t1 <= p.t0) continue;
    s += fmt::format("<rect x=\"{:.1f}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"{}\"/>\n", X(p.t0), top,
                     X(p.t1) - X(p.t0), ph, p.fill);
    if (X(p.t1) - X(p.t0) > 50)
      s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" fill=\"#555\">{}</text>\n",
                       (X(p.t0) + X(p.t1)) / 2, top + ph - 8, p.name);
  }
  // Axes and grid.
  const double ystep = tick_step(y_max / gib, 5) * gib;
  for (double b = 0; b <= y_max; b += ystep)
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n"
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        left, Y(b), left + pw, Y(b), left - 6, Y(b) + 4, format_bytes(size_t(b)));
  const double xstep = tick_step(t_end, 8);
  for (double t = 0; t <= t_end * 1.0001; t += xstep)
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", X(t), top + ph + 18, t);
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">model time (s)</text>\n"
      "<text x=\"18\" y=\"{}\" transform=\"rotate(-90 18 {})\" text-anchor=\"middle\">device arena in use</text>\n"
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
      left + pw / 2, H - 14, top + ph / 2, top + ph / 2, left, top, pw, ph);
  // In-use bytes, step-wise.
  std::string pts = fmt::format("{:.1f},{:.1f}", X(0), Y(double(f.persistent_bytes)));
  size_t last = f.persistent_bytes;
  for (size_t i = f.step_first_event; i < f.events.size(); ++i) {
    const auto& e = f.events[i];
    const double x = X(e.time_s - f.step_start_s);
    pts += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", x, Y(double(last)), x, Y(double(e.in_use)));
    last = e.in_use;
  }
  pts += fmt::format(" {:.1f},{:.1f}", X(t_end), Y(double(last)));
  s += "<polyline fill=\"none\" stroke=\"#1a73e8\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
  // Peak and budget.
  s += fmt::format(
      "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#d93025\"/>\n"
      "<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#d93025\">peak {} ({})</text>\n",
      X(f.peak_at_s), Y(double(f.peak_bytes)), std::min(X(f.peak_at_s) + 8, left + pw - 200),
      Y(double(f.peak_bytes)) - 8, format_bytes(f.peak_bytes), f.peak_phase);
  if (budget)
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#d93025\" stroke-dasharray=\"6 4\"/>\n"
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#d93025\">budget {}</text>\n",
        left, Y(double(budget)), left + pw, Y(double(budget)), left + pw - 4, Y(double(budget)) - 4,
        format_bytes(budget));
  s += "</svg>\n";
  return s;
}

}  // namespace strata
