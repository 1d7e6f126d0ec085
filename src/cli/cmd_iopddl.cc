/// `autoshard iopddl PROBLEM [TIMEOUT_S]`: the ASPLOS 2025 IOPDDL contest interface.
/// Progress lines start with '#'; the last line on stdout is the solution (`[]` if none).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <streambuf>
#include <string>

#include "cli/common.h"
#include "ir/file_util.h"
#include "solver/anytime.h"

namespace autoshard::cli {

namespace {
struct IopddlArgs {
  std::string problem;
  double timeout = 60;
  int threads = 0;
};

/// Forwards everything to another stream buffer and remembers the last "# error: ..." line,
/// so that a read error reported on stdout (the contest interface) also becomes the CLI's
/// one-line error on stderr.
class ErrorTap : public std::streambuf {
 public:
  explicit ErrorTap(std::streambuf* dest) : dest_(dest) {}
  const std::string& error() const { return error_; }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    if (c == '\n') {
      if (line_.rfind("# error: ", 0) == 0) error_ = line_.substr(9);
      line_.clear();
    } else {
      line_.push_back(static_cast<char>(c));
    }
    return dest_->sputc(static_cast<char>(c));
  }
  int sync() override { return dest_->pubsync(); }

 private:
  std::streambuf* dest_;
  std::string line_;
  std::string error_;
};
}  // namespace

void register_iopddl(CLI::App& app) {
  auto a = std::make_shared<IopddlArgs>();
  CLI::App* sub = app.add_subcommand(
      "iopddl", "solve an IOPDDL contest problem; the last line printed is the solution");
  sub->add_option("problem", a->problem, "problem JSON (plain or .gz)")->required();
  sub->add_option("timeout", a->timeout, "timeout in seconds")->capture_default_str();
  sub->add_option("--threads", a->threads, "worker threads (default: the cores available)");
  sub->callback([a] {
    if (!(a->timeout > 0))
      throw std::invalid_argument(fmt::format("timeout: expected > 0 seconds, got {}", a->timeout));
    if (a->threads < 0)
      throw std::invalid_argument(fmt::format("--threads: expected >= 0, got {}", a->threads));
    ErrorTap tap(std::cout.rdbuf());
    std::ostream out(&tap);
    int rc = run_iopddl(a->problem, a->timeout, a->threads, out);
    out.flush();
    if (rc == 0) return;
    if (!tap.error().empty()) {
      std::string msg = tap.error();
      // Name the file even if the reader's message does not.
      if (msg.rfind(a->problem, 0) != 0) msg = a->problem + ": " + msg;
      throw std::runtime_error(one_line(msg));
    }
    throw std::runtime_error(fmt::format("{}: no feasible solution found", a->problem));
  });
}

}  // namespace autoshard::cli
