// Saving a model on a device mesh (mesh_state.h): each rank's pieces, each value once — a piece
// replicated over dp is split among the dp ranks (each writes its 1/dp of the flattened piece), a
// parameter replicated over tp is written by tp rank 0 — and rank 0's merge of every rank's
// description into the manifest.
#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>

#include "checkpoint/format/training_state.h"
#include "checkpoint/sharded/mesh_state.h"
#include "cohort/device_mesh.h"
#include "cohort/error.h"
#include "cohort/mesh_checkpoint.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {
namespace {

std::string dims_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// A mesh dimension's size and this rank's coordinate there; size 1 where the mesh lacks it.
std::pair<int, int> dim_of(const DeviceMesh& mesh, const std::string& name) {
  for (const auto& d : mesh.dims())
    if (d.name == name) return {d.size, mesh.coordinate(name)};
  return {1, 0};
}

}  // namespace

MeshCapture mesh_capture(MeshCheckpointable& model, const torch::optim::Optimizer* optimizer, int rank) {
  const DeviceMesh& mesh = model.checkpoint_mesh();
  const auto [dp_size, dp] = dim_of(mesh, "dp");
  const auto [tp_size, tp] = dim_of(mesh, "tp");
  const int pp = dim_of(mesh, "pp").second;
  MeshCapture out;
  nlohmann::ordered_json mesh_dims = nlohmann::ordered_json::array();
  for (const auto& d : mesh.dims()) mesh_dims.push_back({{"name", d.name}, {"size", d.size}});
  out.mesh_json = mesh_dims.dump();
  nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
  for (const MeshParameter& p : model.mesh_parameters()) {
    if (p.copy) continue;  // its stage saves it (a restore fills the copy from that)
    const std::string where = "parameter \"" + p.name + "\" of shape " + dims_text(p.shape);
    if (!p.local.defined()) throw CheckpointError(rank, where + " has no local tensor");
    const int k = p.tp_dim;
    if (k < -1 || k >= static_cast<int>(p.shape.size()))
      throw CheckpointError(rank, where + ": tp_dim " + std::to_string(k) + " is not one of its dimensions (or -1)");
    if (p.stage != pp)
      throw CheckpointError(rank, where + " is said to be on stage " + std::to_string(p.stage) +
                                      ", but this rank is on pipeline stage " + std::to_string(pp));
    std::vector<int64_t> expect = p.shape;
    if (k >= 0) {
      if (expect[k] % tp_size != 0)
        throw CheckpointError(rank, where + ": dimension " + std::to_string(k) + " of " + std::to_string(expect[k]) +
                                        " does not split over tp=" + std::to_string(tp_size));
      expect[k] /= tp_size;
    }
    if (p.local.sizes() != c10::IntArrayRef(expect))
      throw CheckpointError(rank, where + ": this rank's piece is " + dims_text(p.local.sizes().vec()) + ", the mesh gives " +
                                      dims_text(expect));
    if (k < 0 && tp != 0) continue;  // replicated over tp: tp rank 0 writes it
    const int block = k >= 0 ? tp : 0;
    const int64_t n = p.local.numel(), per = (n + dp_size - 1) / dp_size;
    const int64_t a = std::min(n, per * dp), b = std::min(n, per * (dp + 1));  // this dp rank's 1/dp
    nlohmann::ordered_json base{{"name", p.name},     {"shape", p.shape}, {"dtype", safetensors_dtype(p.local.scalar_type(), rank)},
                                {"tp_dim", k},        {"stage", p.stage}, {"tp", k >= 0 ? tp_size : 1},
                                {"block", block}};
    auto add = [&](const std::string& field, const at::Tensor& t, int64_t begin, int64_t end, bool scalar) {
      auto piece = base;
      piece["field"] = field;
      if (scalar) {
        piece["scalar"] = true;
      } else {
        piece["begin"] = begin;
        piece["end"] = end;
      }
      pieces.push_back(std::move(piece));
      out.tensors.emplace_back(p.name + "/" + field, t);
    };
    if (b > a) add("param", p.local.detach().reshape(-1).slice(0, a, b), a, b, false);
    if (!optimizer || !p.optimizer_param.defined()) continue;
    const int64_t off = p.optimizer_offset, held = p.optimizer_param.numel();
    if (off < 0 || off + held > n)
      throw CheckpointError(rank, where + ": its optimizer's tensor holds elements [" + std::to_string(off) + ", " +
                                      std::to_string(off + held) + ") of a piece of " + std::to_string(n));
    // State of the whole piece (no ZeRO) is replicated over dp: this dp rank's 1/dp, as for the
    // parameter. A ZeRO slice is this rank's alone: all of it.
    const bool whole = off == 0 && held == n;
    const int64_t lo = whole ? a : off, hi = whole ? b : off + held;
    NamedTensors fields;
    param_state_tensors(*optimizer, p.optimizer_param, p.name, fields, rank);
    for (const auto& [name, t] : fields) {
      const std::string field = name.substr(p.name.size() + 1);
      if (t.dim() == 0) {  // a step count: once, from the rank that holds the first elements
        if (block == 0 && lo == 0 && hi > lo) add(field, t.detach(), 0, 0, true);
      } else if (t.numel() == held) {
        if (hi > lo) add(field, t.detach().reshape(-1).slice(0, lo - off, hi - off), lo, hi, false);
      } else {
        throw CheckpointError(rank, where + ": optimizer field \"" + field + "\" has " + std::to_string(t.numel()) +
                                        " elements, its tensor " + std::to_string(held));
      }
    }
  }
  out.pieces_json = pieces.dump();
  if (optimizer) out.optimizer_json = optimizer_description(*optimizer, rank);
  return out;
}

std::string pieces_with_hashes(const std::string& pieces_json, const NamedTensors& tensors) {
  auto pieces = nlohmann::ordered_json::parse(pieces_json);
  for (size_t i = 0; i < pieces.size() && i < tensors.size(); ++i) {
    Hasher h;
    h.update(tensors[i].second.data_ptr(), tensors[i].second.nbytes());
    pieces[i]["xxh3"] = to_hex(h.digest());
  }
  return pieces.dump();
}

std::string merge_mesh_pieces(const std::string& mesh_json, const std::vector<std::string>& per_rank, int rank) {
  nlohmann::ordered_json out{{"mesh", nlohmann::ordered_json::parse(mesh_json)}, {"params", nlohmann::ordered_json::object()}};
  auto& params = out["params"];
  std::map<std::string, int> first_rank;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    for (const auto& piece : nlohmann::ordered_json::parse(per_rank[r])) {
      const std::string name = piece.at("name").get<std::string>();
      nlohmann::ordered_json placement{{"shape", piece.at("shape")}, {"dtype", piece.at("dtype")}, {"tp_dim", piece.at("tp_dim")},
                                       {"stage", piece.at("stage")}, {"tp", piece.at("tp")}};
      if (!params.contains(name)) {
        params[name] = placement;
        params[name]["pieces"] = nlohmann::ordered_json::array();
        first_rank[name] = static_cast<int>(r);
      }
      auto& p = params[name];
      for (const auto& [key, value] : placement.items())
        if (p[key] != value)
          throw CheckpointError(rank, "the ranks disagree about parameter \"" + name + "\": rank " +
                                          std::to_string(first_rank[name]) + " has " + key + " " + p[key].dump() +
                                          ", rank " + std::to_string(r) + " " + value.dump());
      nlohmann::ordered_json entry{{"field", piece.at("field")}, {"rank", r}, {"block", piece.at("block")}};
      if (piece.value("scalar", false)) {
        entry["scalar"] = true;
      } else {
        entry["begin"] = piece.at("begin");
        entry["end"] = piece.at("end");
      }
      entry["xxh3"] = piece.at("xxh3");
      p["pieces"].push_back(std::move(entry));
    }
  }
  // Every element of every parameter once: a stage whose ranks saved nothing would be lost.
  for (auto& [name, p] : params.items()) {
    int64_t numel = 1, held = 0;
    for (const auto& d : p["shape"]) numel *= d.get<int64_t>();
    for (const auto& piece : p["pieces"])
      if (piece["field"] == "param") held += piece["end"].get<int64_t>() - piece["begin"].get<int64_t>();
    if (held != numel)
      throw CheckpointError(rank, "parameter \"" + name + "\": the ranks' pieces hold " + std::to_string(held) + " of its " +
                                      std::to_string(numel) + " elements (each rank must list the parameters of its stage)");
  }
  return out.dump();
}

bool is_mesh_sharding(const std::string& sharding_json) {
  if (sharding_json.empty()) return false;
  const auto j = detail::parse_capped_or_discarded(sharding_json);
  return j.is_object() && j.contains("mesh") && j.contains("params");
}

}  // namespace cohort::ckpt
