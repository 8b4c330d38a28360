// hub/outputs/prometheus_text.h — writing the Prometheus text exposition format 0.0.4: a family's
// `# HELP` and `# TYPE` lines, then its samples, label values escaped (\\, \", \n), values as
// Go's strconv writes them (NaN, +Inf, -Inf for the non-finite ones). The hub decides what to
// expose (hub/outputs/prometheus.cpp, Hub::prometheus_text); this file only gets the syntax right.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cohort::hub {

using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  /// Starts a family: `type` is gauge or counter. Families must not repeat.
  void family(const std::string& name, const std::string& type, const std::string& help);
  /// One sample of the current family.
  void sample(const Labels& labels, double value);
  const std::string& text() const { return out_; }

  static std::string escape_label_value(const std::string& value);
  static std::string escape_help(const std::string& help);
  static std::string format_value(double value);

 private:
  std::string out_;
  std::string name_;
};

}  // namespace cohort::hub
