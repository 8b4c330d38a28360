// The "metrics" message of a step record (docs/monitoring.md): the JSON text the agent's hub reads.
// See worker_monitor.h.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "runtime/json_fields.h"
#include "step_timeline.h"
#include "worker_monitor.h"

namespace cohort::detail {
namespace {

void append_escaped(std::string& out, const std::string& s) {
  // A user's name need not be UTF-8, and the agent's parser refuses the whole datagram over one
  // byte that is not: past ASCII, nlohmann writes it, with U+FFFD for such bytes.
  if (std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    out += dump_text(nlohmann::json(s));
    return;
  }
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

const char* metrics_non_finite(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

}  // namespace

void append_json_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += '"';
    out += metrics_non_finite(v);
    out += '"';
    return;
  }
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  out.append(buf, res.ptr);
}

std::string metrics_message(const StepRecord& r, const WorkerIdentity& who) {
  std::string out;
  out.reserve(512);
  auto key = [&](const char* k) {
    out += ",\"";
    out += k;
    out += "\":";
  };
  out += "{\"type\":\"metrics\",\"pid\":";
  append_int(out, who.pid);
  key("rank"), append_int(out, who.rank);
  key("world_size"), append_int(out, who.world_size);
  key("restart"), append_int(out, who.restart_count);
  key("step"), append_int(out, r.step);
  key("t"), append_json_number(out, r.t);
  key("step_s"), append_json_number(out, r.step_s);
  if (r.phase_mask) {
    key("phases");
    out += '{';
    bool first = true;
    for (int p = 0; p < kPhaseCount; ++p) {
      if (!(r.phase_mask & (1u << p))) continue;
      if (!first) out += ',';
      first = false;
      out += '"';
      out += to_string(static_cast<Phase>(p));
      out += "\":";
      append_json_number(out, r.phase_s[p]);
    }
    out += '}';
  }
  if (r.samples) key("samples"), append_int(out, *r.samples);
  if (r.samples_per_s) key("samples_per_s"), append_json_number(out, *r.samples_per_s);
  if (r.grad_norm) key("grad_norm"), append_json_number(out, *r.grad_norm);
  if (r.skipped) key("skipped"), out += "true";
  key("rss_bytes"), append_int(out, r.rss_bytes);
  if (r.cuda_bytes) key("cuda_bytes"), append_int(out, *r.cuda_bytes);
  key("comm_bytes"), append_int(out, r.comm_bytes);
  key("comm_s"), append_json_number(out, r.comm_s);
  if (r.busbw) key("busbw"), append_json_number(out, *r.busbw);
  if (r.compression) key("compression"), append_json_number(out, *r.compression);
  key("monitor_s"), append_json_number(out, r.monitor_s);
  key("cpu_s"), append_json_number(out, r.cpu_s);
  key("scalars");
  out += '{';
  for (size_t i = 0; i < r.scalars.size(); ++i) {
    if (i) out += ',';
    append_escaped(out, r.scalars[i].first);
    out += ':';
    append_json_number(out, r.scalars[i].second);
  }
  out += '}';
  if (!r.timeline.spans.empty() || r.timeline.truncated) key("timeline"), append_timeline_json(out, r.timeline);
  out += '}';
  return out;
}

}  // namespace cohort::detail
