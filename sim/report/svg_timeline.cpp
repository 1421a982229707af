#include "report/svg_timeline.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "core/errors.hpp"

namespace cs::report {

TimelineRecorder::TimelineRecorder(const replay::Replay& replay) {
    const auto& workers = replay.workers();
    row_of_worker_.assign(workers.size(), -1);
    for (std::size_t w = 0; w < workers.size(); ++w)
        if (workers[w].dp == 0) {
            row_of_worker_[w] = workers[w].stage;
            rows_ = std::max(rows_, workers[w].stage + 1);
        }
}

void TimelineRecorder::on_pass(const replay::PassRecord& pass) {
    if (pass.worker < 0 || static_cast<std::size_t>(pass.worker) >= row_of_worker_.size())
        throw SimulationError("svg timeline",
                              "pass of unknown worker " + std::to_string(pass.worker));
    const int row = row_of_worker_[static_cast<std::size_t>(pass.worker)];
    if (row < 0) return;
    blocks_.push_back(
        TimelineBlock{row, pass.microbatch, pass.chunk, pass.pass, pass.start, pass.end});
}

void TimelineRecorder::on_iteration_end(Time end) {
    end_ = end;
}

std::string markup_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '&':
                out += "&amp;";
                break;
            case '<':
                out += "&lt;";
                break;
            case '>':
                out += "&gt;";
                break;
            case '"':
                out += "&quot;";
                break;
            default:
                out += c;
        }
    }
    return out;
}

namespace {

// Layout in SVG user units (pixels).
constexpr double kLeft = 86;         // stage labels
constexpr double kPlotWidth = 1000;  // the longest iteration
constexpr double kRight = 24;
constexpr double kTop = 8;
constexpr double kTitle = 24;
constexpr double kRowHeight = 20;
constexpr double kRowGap = 3;
constexpr double kAxis = 30;
constexpr double kPanelGap = 14;
constexpr double kLegend = 30;

// A coordinate or length in the SVG, to two decimals.
std::string coord(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

std::string hex_colour(double hue_deg, double saturation, double lightness) {
    // HSL to RGB (CSS Color 3, section 4.2.4), written out so that every SVG reader agrees.
    const double c = (1 - std::abs(2 * lightness - 1)) * saturation;
    const double h = std::fmod(hue_deg, 360.0) / 60.0;
    const double x = c * (1 - std::abs(std::fmod(h, 2.0) - 1));
    std::array<double, 3> rgb{};
    if (h < 1)
        rgb = {c, x, 0};
    else if (h < 2)
        rgb = {x, c, 0};
    else if (h < 3)
        rgb = {0, c, x};
    else if (h < 4)
        rgb = {0, x, c};
    else if (h < 5)
        rgb = {x, 0, c};
    else
        rgb = {c, 0, x};
    const double m = lightness - c / 2;
    char buf[8];
    std::snprintf(buf, sizeof buf, "#%02x%02x%02x",
                  static_cast<int>(std::lround((rgb[0] + m) * 255)),
                  static_cast<int>(std::lround((rgb[1] + m) * 255)),
                  static_cast<int>(std::lround((rgb[2] + m) * 255)));
    return buf;
}

// Consecutive microbatches a golden angle apart on the colour wheel, so neighbours differ.
double hue_of(int microbatch) {
    return std::fmod(20.0 + 137.507764 * microbatch, 360.0);
}

std::string fill_of(int microbatch, schedule::Pass pass) {
    const double hue = hue_of(microbatch);
    switch (pass) {
        case schedule::Pass::Forward:
            return hex_colour(hue, 0.70, 0.78);
        case schedule::Pass::Backward:
        case schedule::Pass::BackwardInput:
            return hex_colour(hue, 0.60, 0.45);
        case schedule::Pass::BackwardWeight:
            return hex_colour(hue, 0.55, 0.28);
    }
    return "#000000";
}

const char* pass_class(schedule::Pass pass) {
    switch (pass) {
        case schedule::Pass::Forward:
            return "F";
        case schedule::Pass::Backward:
            return "B";
        case schedule::Pass::BackwardInput:
            return "B";
        case schedule::Pass::BackwardWeight:
            return "W";
    }
    return "?";
}

// A time axis unit and tick step: 1, 2 or 5 times a power of ten, about eight ticks.
struct Axis {
    double step_s = 1;
    double unit_s = 1;
    const char* unit = "s";
    int decimals = 0;
};

Axis make_axis(double span_s) {
    Axis a;
    if (span_s <= 0) span_s = 1e-9;
    const double raw = span_s / 8;
    const double p10 = std::pow(10.0, std::floor(std::log10(raw)));
    const double r = raw / p10;
    a.step_s = (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * p10;
    if (span_s >= 1)
        a.unit_s = 1, a.unit = "s";
    else if (span_s >= 1e-3)
        a.unit_s = 1e-3, a.unit = "ms";
    else if (span_s >= 1e-6)
        a.unit_s = 1e-6, a.unit = "us";
    else
        a.unit_s = 1e-9, a.unit = "ns";
    const double step_in_unit = a.step_s / a.unit_s;
    a.decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step_in_unit) + 1e-9)));
    return a;
}

std::string format_in(double seconds, const Axis& a) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.*f", a.decimals, seconds / a.unit_s);
    return buf;
}

std::string format_duration(Time t) {
    const double s = t.seconds();
    char buf[32];
    if (s >= 1)
        std::snprintf(buf, sizeof buf, "%.3f s", s);
    else if (s >= 1e-3)
        std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
    return buf;
}

std::string block_label(const TimelineBlock& b, int chunks) {
    std::string label = std::to_string(b.microbatch);
    if (chunks > 1) label += static_cast<char>('a' + std::min(b.chunk, 25));
    return label;
}

double panel_height(const TimelinePanel& p) {
    return kTitle + p.rows * (kRowHeight + kRowGap) + kAxis;
}

// The time axis shared by every panel: x of a time, and the ticks.
struct Scale {
    double span_s = 0;
    double px_per_s = 0;
    Axis axis;
    double x_of(Time t) const { return kLeft + t.seconds() * px_per_s; }
};

// One panel (a schedule's title, its stages' rows, its pass blocks and its time axis) from y0.
void write_panel(std::ostream& out, const TimelinePanel& p, const Scale& scale, double y0) {
    const Axis& axis = scale.axis;
    char title[256];
    std::snprintf(title, sizeof title, "   iteration %s   bubble %.2f%%",
                  format_duration(p.iteration_time).c_str(), p.bubble_fraction * 100);
    out << "<g class=\"panel\">\n"
        << "<text x=\"" << coord(kLeft) << "\" y=\"" << coord(y0 + 16)
        << "\" font-size=\"14\"><tspan font-weight=\"bold\">" << markup_escape(p.schedule)
        << "</tspan>" << markup_escape(title) << "</text>\n";
    const double rows_top = y0 + kTitle;
    for (int r = 0; r < p.rows; ++r) {
        const double y = rows_top + r * (kRowHeight + kRowGap);
        out << "<text x=\"" << coord(kLeft - 8) << "\" y=\"" << coord(y + kRowHeight / 2 + 4)
            << "\" text-anchor=\"end\">stage " << r << "</text>\n"
            << "<rect class=\"idle\" x=\"" << coord(kLeft) << "\" y=\"" << coord(y) << "\" width=\""
            << coord(scale.x_of(p.iteration_time) - kLeft) << "\" height=\"" << coord(kRowHeight)
            << "\" fill=\"#e4e4e4\"/>\n";
    }
    for (const auto& b : p.blocks) {
        const double x = scale.x_of(b.start);
        const double w = std::max(0.0, scale.x_of(b.end) - x);
        const double y = rows_top + b.row * (kRowHeight + kRowGap);
        const bool light = b.pass == schedule::Pass::Forward;
        const std::string label = block_label(b, p.chunks);
        out << "<rect class=\"pass " << pass_class(b.pass) << "\" x=\"" << coord(x) << "\" y=\""
            << coord(y) << "\" width=\"" << coord(w) << "\" height=\"" << coord(kRowHeight)
            << "\" fill=\"" << fill_of(b.microbatch, b.pass)
            << "\" stroke=\"#ffffff\" stroke-width=\"0.6\"><title>" << pass_class(b.pass)
            << " microbatch " << b.microbatch << " chunk " << b.chunk << ": "
            << format_in(b.start.seconds(), axis) << "-" << format_in(b.end.seconds(), axis) << " "
            << axis.unit << "</title></rect>\n";
        // A label only where it fits (about 6 px per character at 10 px).
        if (w >= 6.0 * static_cast<double>(label.size()) + 2)
            out << "<text x=\"" << coord(x + w / 2) << "\" y=\"" << coord(y + kRowHeight / 2 + 4)
                << "\" text-anchor=\"middle\" font-size=\"10\" fill=\""
                << (light ? "#222222" : "#ffffff") << "\">" << label << "</text>\n";
    }
    const double axis_y = rows_top + p.rows * (kRowHeight + kRowGap) + 2;
    out << "<line x1=\"" << coord(kLeft) << "\" y1=\"" << coord(axis_y) << "\" x2=\""
        << coord(kLeft + kPlotWidth) << "\" y2=\"" << coord(axis_y)
        << "\" stroke=\"#444444\" stroke-width=\"1\"/>\n";
    for (int k = 0;; ++k) {
        const double t = k * axis.step_s;
        if (t > scale.span_s * (1 + 1e-9)) break;
        const double x = kLeft + t * scale.px_per_s;
        out << "<line x1=\"" << coord(x) << "\" y1=\"" << coord(axis_y) << "\" x2=\"" << coord(x)
            << "\" y2=\"" << coord(axis_y + 4) << "\" stroke=\"#444444\" stroke-width=\"1\"/>\n"
            << "<text x=\"" << coord(x) << "\" y=\"" << coord(axis_y + 15)
            << "\" text-anchor=\"middle\" fill=\"#444444\">" << format_in(t, axis)
            << (k == 0 ? std::string(" ") + axis.unit : std::string()) << "</text>\n";
    }
    out << "</g>\n";
}

// The legend below the panels (pass shades in one hue, the idle grey) and the closing tag.
void write_legend(std::ostream& out, const std::vector<TimelinePanel>& panels, double y0) {
    const double ly = y0 + 4;
    double lx = kLeft;
    const auto swatch = [&](const std::string& fill, const std::string& text) {
        out << "<rect class=\"legend\" x=\"" << coord(lx) << "\" y=\"" << coord(ly)
            << "\" width=\"14\" height=\"12\" fill=\"" << fill << "\"/>\n"
            << "<text x=\"" << coord(lx + 18) << "\" y=\"" << coord(ly + 10) << "\">"
            << markup_escape(text) << "</text>\n";
        lx += 26 + 6.2 * static_cast<double>(text.size());
    };
    swatch(fill_of(0, schedule::Pass::Forward), "forward");
    swatch(fill_of(0, schedule::Pass::Backward), "backward");
    bool any_weight = false;
    for (const auto& p : panels)
        for (const auto& b : p.blocks)
            any_weight |= b.pass == schedule::Pass::BackwardWeight;
    if (any_weight) swatch(fill_of(0, schedule::Pass::BackwardWeight), "weight gradient");
    swatch("#e4e4e4", "idle");
    out << "<text x=\"" << coord(lx) << "\" y=\"" << coord(ly + 10)
        << "\" fill=\"#444444\">colour and number: microbatch; letter: model chunk</text>\n"
        << "</svg>\n";
}

}  // namespace

void write_svg_timelines(std::ostream& out, const std::vector<TimelinePanel>& panels) {
    Time longest = Time::zero();
    for (const auto& p : panels) {
        longest = std::max(longest, p.iteration_time);
        for (const auto& b : p.blocks)
            longest = std::max(longest, b.end);
    }
    Scale scale;
    scale.span_s = longest.seconds() > 0 ? longest.seconds() : 1e-9;
    scale.px_per_s = kPlotWidth / scale.span_s;
    scale.axis = make_axis(scale.span_s);

    double height = kTop + kLegend;
    for (const auto& p : panels)
        height += panel_height(p) + kPanelGap;
    const double width = kLeft + kPlotWidth + kRight;

    out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << coord(width) << "\" height=\""
        << coord(height) << "\" viewBox=\"0 0 " << coord(width) << " " << coord(height)
        << "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"11\">\n"
        << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" << coord(width) << "\" height=\""
        << coord(height) << "\" fill=\"#ffffff\"/>\n";

    double y0 = kTop;
    for (const auto& p : panels) {
        write_panel(out, p, scale, y0);
        y0 += panel_height(p) + kPanelGap;
    }
    write_legend(out, panels, y0);
}

}  // namespace cs::report
