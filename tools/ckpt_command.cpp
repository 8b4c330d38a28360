#include "ckpt_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <sstream>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/format/safetensors.h"
#include "runtime/json_fields.h"

namespace cohort::tools {
namespace {

std::string human_bytes(uint64_t b) {
  char out[32];
  if (b >= (1ull << 30)) std::snprintf(out, sizeof(out), "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(out, sizeof(out), "%.1f MiB", b / double(1ull << 20));
  else if (b >= (1ull << 10)) std::snprintf(out, sizeof(out), "%.1f KiB", b / double(1ull << 10));
  else std::snprintf(out, sizeof(out), "%llu B", static_cast<unsigned long long>(b));
  return out;
}

std::string when(int64_t unix_ms) {
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  char out[32];
  std::strftime(out, sizeof(out), "%Y-%m-%d %H:%M:%S", std::localtime(&t));
  return out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// A model on a device mesh (docs/checkpointing.md, "Across meshes"): the manifest's "sharding"
// names the mesh it was saved from and where each parameter was; null for other checkpoints.
nlohmann::ordered_json mesh_sharding(const ckpt::Manifest& m) {
  if (m.sharding_json.empty()) return nullptr;
  auto j = cohort::detail::parse_capped_or_discarded<nlohmann::ordered_json>(m.sharding_json);
  if (!j.is_object() || !j.contains("mesh") || !j["mesh"].is_array()) return nullptr;
  return j;
}

// "pp=1 x dp=2 x tp=1"
std::string mesh_text(const nlohmann::ordered_json& sharding) {
  std::string out;
  for (const auto& d : sharding["mesh"]) {
    const std::string name = d.contains("name") && d["name"].is_string() ? d["name"].get<std::string>() : "?";
    const std::string size = d.contains("size") && d["size"].is_number_integer() ? std::to_string(d["size"].get<int64_t>()) : "?";
    out += (out.empty() ? "" : " x ") + name + "=" + size;
  }
  return out;
}

int list(const CkptOptions& o) {
  const auto listed = ckpt::list_checkpoints(o.path);
  if (o.json) {
    auto out = nlohmann::json::array();
    for (const auto& c : listed) {
      nlohmann::json e{{"path", c.path}, {"step", c.step}, {"committed", c.manifest.has_value()}};
      if (c.manifest) {
        uint64_t bytes = 0;
        for (const auto& f : c.manifest->files) bytes += f.bytes;
        e["world_size"] = c.manifest->world_size;
        e["epoch"] = c.manifest->epoch;
        e["bytes"] = bytes;
        if (const auto mesh = mesh_sharding(*c.manifest); !mesh.is_null()) e["mesh"] = mesh_text(mesh);
      } else {
        e["problem"] = c.problem;
      }
      out.push_back(e);
    }
    std::cout << cohort::detail::dump_text(out, 1) << "\n";  // paths and problems: any bytes
    return 0;
  }
  if (listed.empty()) {
    std::cout << "no checkpoints in " << o.path << "\n";
    return 0;
  }
  std::printf("%-16s %8s %6s %6s %11s  %s\n", "checkpoint", "step", "epoch", "world", "size", "saved / state");
  for (const auto& c : listed) {
    const std::string name = c.path.substr(c.path.rfind('/') + 1);
    if (!c.manifest) {
      std::printf("%-16s %8lld %6s %6s %11s  not a checkpoint: %s\n", name.c_str(), static_cast<long long>(c.step), "-",
                  "-", "-", c.problem.c_str());
      continue;
    }
    uint64_t bytes = 0;
    for (const auto& f : c.manifest->files) bytes += f.bytes;
    const auto mesh = mesh_sharding(*c.manifest);
    std::printf("%-16s %8lld %6lld %6d %11s  %s%s\n", name.c_str(), static_cast<long long>(c.step),
                static_cast<long long>(c.manifest->epoch), c.manifest->world_size, human_bytes(bytes).c_str(),
                when(c.manifest->created_unix_ms).c_str(), mesh.is_null() ? "" : ("  mesh " + mesh_text(mesh)).c_str());
  }
  std::cout << "(committed means listed with a manifest; `cohort ckpt verify PATH` checks every byte)\n";
  return 0;
}

int verify(const CkptOptions& o) {
  const std::string problem = ckpt::verify_checkpoint(o.path);
  if (!problem.empty()) {
    std::cerr << "cohort ckpt verify: " << o.path << " is NOT valid: " << problem << std::endl;
    return 1;
  }
  std::cout << o.path << ": valid (every file matches its size and checksum)\n";
  return 0;
}

int inspect(const CkptOptions& o) {
  std::string problem;
  const auto m = ckpt::read_manifest(o.path, &problem);
  if (!m) {
    std::cerr << "cohort ckpt inspect: " << o.path << ": " << problem << std::endl;
    return 1;
  }
  nlohmann::ordered_json out;
  out["path"] = o.path;
  out["step"] = m->step;
  out["epoch"] = m->epoch;
  out["world_size"] = m->world_size;
  out["created"] = when(m->created_unix_ms);
  const auto mesh = mesh_sharding(*m);
  if (!mesh.is_null()) {  // the mesh it was saved from, and each parameter's placement there
    out["mesh"] = mesh["mesh"];
    auto& params = out["mesh_parameters"] = nlohmann::ordered_json::object();
    try {  // a damaged manifest's odd values are shown as unreadable, not thrown
      if (mesh.contains("params") && mesh["params"].is_object())
        for (const auto& [name, p] : mesh["params"].items())
          params[name] = {{"shape", p.value("shape", nlohmann::ordered_json())}, {"tp_dim", p.value("tp_dim", -1)},
                          {"stage", p.value("stage", 0)}, {"pieces", p.contains("pieces") ? p["pieces"].size() : 0}};
    } catch (const std::exception& e) {
      params = nlohmann::ordered_json::object();
      out["mesh_problem"] = e.what();
    }
  }
  out["metadata"] = m->metadata;
  out["sampler"] = m->sampler_json.empty() ? nlohmann::ordered_json() : cohort::detail::parse_capped<nlohmann::ordered_json>(m->sampler_json);
  out["optimizer"] = m->optimizer_json.empty() ? nlohmann::ordered_json() : cohort::detail::parse_capped<nlohmann::ordered_json>(m->optimizer_json);
  auto& files = out["files"] = nlohmann::ordered_json::array();
  int status = 0;
  for (const auto& f : m->files) {
    nlohmann::ordered_json e{{"name", f.name}, {"role", f.role}, {"rank", f.rank}, {"bytes", f.bytes}};
    try {
      const auto header = ckpt::read_header(o.path + "/" + f.name);
      auto& tensors = e["tensors"] = nlohmann::ordered_json::array();
      for (const auto& t : header.tensors) tensors.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}});
    } catch (const std::exception& ex) {
      e["problem"] = ex.what();
      status = 1;
    }
    files.push_back(e);
  }
  if (o.json) {
    std::cout << cohort::detail::dump_text(out, 1) << "\n";  // paths and problems: any bytes
    return status;
  }
  std::cout << "checkpoint  " << o.path << "\nstep        " << m->step << "\nepoch       " << m->epoch
            << "\nworld size  " << m->world_size << "\nsaved       " << out["created"].get<std::string>() << "\n";
  if (!mesh.is_null()) {
    std::cout << "mesh        " << mesh_text(mesh) << "\n";
    for (const auto& [name, p] : out["mesh_parameters"].items()) {
      const int tp_dim = p["tp_dim"].is_number_integer() ? p["tp_dim"].get<int>() : -1;
      std::cout << "  " << name << "  " << p["shape"].dump() << ", "
                << (tp_dim >= 0 ? "tp splits dim " + std::to_string(tp_dim) : std::string("replicated over tp"))
                << ", stage " << p["stage"].dump() << ", " << p["pieces"].dump() << " pieces\n";
    }
  }
  if (!m->optimizer_json.empty()) std::cout << "optimizer   " << m->optimizer_json << "\n";
  if (!m->sampler_json.empty()) std::cout << "sampler     " << m->sampler_json << "\n";
  std::cout << "metadata    " << (m->metadata.empty() ? "(none)" : "") << "\n";
  for (const auto& [k, v] : m->metadata) std::cout << "  " << k << " = " << v << "\n";
  for (const auto& f : files) {
    std::cout << f["name"].get<std::string>() << " (" << f["role"].get<std::string>() << ", rank "
              << f["rank"].get<int>() << ", " << human_bytes(f["bytes"].get<uint64_t>()) << ")\n";
    if (f.contains("problem")) std::cout << "  unreadable: " << f["problem"].get<std::string>() << "\n";
    if (f.contains("tensors"))
      for (const auto& t : f["tensors"])
        std::cout << "  " << t["name"].get<std::string>() << "  " << t["dtype"].get<std::string>() << " "
                  << shape_text(t["shape"].get<std::vector<int64_t>>()) << "\n";
  }
  return status;
}

}  // namespace

CLI::App* add_ckpt_command(CLI::App& app, CkptOptions& o) {
  CLI::App* ckpt = app.add_subcommand("ckpt", "List, verify and inspect checkpoints (docs/checkpointing.md)");
  ckpt->require_subcommand(1);
  auto* l = ckpt->add_subcommand("list", "The checkpoints in DIR, newest first, and what is not a checkpoint there");
  l->add_option("DIR", o.path, "checkpoint directory (as given to the Checkpointer / --ckpt-dir)")->required();
  l->add_flag("--json", o.json, "machine-readable output");
  auto* v = ckpt->add_subcommand("verify", "Exit 0 if the checkpoint at PATH is valid, else name the first bad file");
  v->add_option("PATH", o.path, "a checkpoint directory (DIR/step-00001200)")->required();
  auto* i = ckpt->add_subcommand("inspect", "Step, world size, tensors (shapes, dtypes) and metadata of a checkpoint");
  i->add_option("PATH", o.path, "a checkpoint directory (DIR/step-00001200)")->required();
  i->add_flag("--json", o.json, "machine-readable output");
  return ckpt;
}

int run_ckpt_command(const CLI::App& ckpt, const CkptOptions& o) {
  if (ckpt.got_subcommand("list")) return list(o);
  if (ckpt.got_subcommand("verify")) return verify(o);
  return inspect(o);
}

}  // namespace cohort::tools
