#pragma once
/// Inline stylesheet and script of report.html (report_assets.cc).
namespace autoshard {
extern const char* const kReportCss;
extern const char* const kReportJs;
}  // namespace autoshard
