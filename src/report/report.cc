#include "report/report.h"

#include <fmt/format.h>

#include "report/report_assets.h"
#include "report/report_data.h"

namespace autoshard {

namespace {

std::string html_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    switch (c) {
      case '&': r += "&amp;"; break;
      case '<': r += "&lt;"; break;
      case '>': r += "&gt;"; break;
      case '"': r += "&quot;"; break;
      default: r += c;
    }
  }
  return r;
}

/// JSON text safe inside <script>: "</" cannot close the element once written "<\/" (a valid
/// JSON escape), and "<!--" cannot open a comment.
std::string script_safe(std::string json) {
  std::string r;
  r.reserve(json.size() + 64);
  for (size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && (json[i + 1] == '/' || json[i + 1] == '!')) {
      r += "\\u003c";
      continue;
    }
    r += json[i];
  }
  return r;
}

}  // namespace

std::string render_report_html(ShardingOptimizer& opt, const Plan& plan) {
  return render_report_html(opt, plan, simulate_step(opt, plan));
}

std::string render_report_html(ShardingOptimizer& opt, const Plan& plan, const StepSimulation& sim) {
  return render_report_page(report_data(opt, plan, sim));
}

std::string render_report_page(const nlohmann::ordered_json& data) {
  const bool pipelined = data.contains("pipeline");
  const std::string model = data["header"]["model"].get<std::string>();
  std::string html;
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // No favicon request, no external resource of any kind.
  html += "<link rel=\"icon\" href=\"data:,\">\n";
  html += fmt::format("<title>autoshard plan: {}</title>\n", html_escape(model));
  html += "<style>";
  html += kReportCss;
  html += "</style>\n</head>\n<body>\n";
  html += R"(<h1 id="title">autoshard plan</h1>
<div class="sub" id="subtitle"></div>
<div class="cards" id="cards"></div>
<div id="warnings"></div>
<div id="islands"></div>
)";
  if (pipelined) {
    html += R"(<h2>Pipeline schedule</h2>
<div class="sub" id="pipeline-sub"></div>
<div id="pipeline-stages"></div><div class="panel" id="pipeline-timeline"></div>
)";
  }
  html += R"(<h2>Graph: one representative block per group of identical layers</h2>
<div class="sub">Click a block to expand it; click a node for its strategy table.  Nodes are coloured by
output placement; red edges are redistributions (collective and time); dashed edges are gradient
agreements with the parameter.</div>
<div class="panel" id="overview"></div>
<h3 id="block-title"></h3>
<div class="legend" id="legend"></div>
<div class="row"><div class="panel" id="block-svg"></div><div class="panel" id="strategy-panel">
<p class="muted">Click a node of the graph (or a row of the node table) to see its strategies.</p></div></div>
)";
  html += pipelined ? "<h2>Step timeline of the shown stage (simulated, one step of its plan)</h2>"
                    : "<h2>Step timeline (simulated)</h2>";
  html += R"(<div class="panel" id="timeline"></div>
<h2>Memory per device (simulated, with redistribution buffers)</h2><div class="panel" id="memory"></div>
<h2>Cost breakdown</h2>
<div class="row"><div><h3>by phase</h3><div id="by-phase"></div></div><div><h3>by op</h3><div id="by-op"></div></div>
<div><h3>by module</h3><div id="by-module"></div></div></div>
<h2>Communication hotspots</h2><div id="hotspots"></div>
<h2>Parameters</h2><div id="params"></div>
<h2>Nodes</h2><div id="nodes"></div>
)";
  html += "<script id=\"report-data\" type=\"application/json\">";
  html += script_safe(data.dump());
  html += "</script>\n<script>";
  html += kReportJs;
  html += "</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace autoshard
