// Restoring a model on a device mesh (mesh_state.h) from a checkpoint saved on any mesh. For each
// parameter this rank holds, the elements it needs are numbered by their place in the whole
// tensor; each is mapped to the saved block and the place in it that holds it, and only the saved
// pieces some element falls in are read — each with one pread of its bytes, checked against the
// XXH3-64 the manifest lists for it (the shard files are not read whole: a rank of a 4-stage
// pipeline reads about a quarter of the checkpoint). The index tensors cost 8 bytes per element of
// the largest piece a rank holds; plain and checkable rather than a block-by-block copy.
#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <map>
#include <memory>

#include "checkpoint/format/safetensors.h"
#include "checkpoint/format/training_state.h"
#include "checkpoint/sharded/mesh_state.h"
#include "cohort/device_mesh.h"
#include "cohort/error.h"
#include "cohort/mesh_checkpoint.h"
#include "runtime/json_fields.h"

namespace cohort::ckpt {
namespace {

std::string shape_text(c10::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

struct Piece {
  std::string field;
  int rank = 0, block = 0;
  int64_t begin = 0, end = 0;
  bool scalar = false;
  uint64_t xxh3 = 0;
};

struct SavedParam {
  std::vector<int64_t> shape;
  int tp_dim = -1, tp = 1, stage = 0;
  std::vector<Piece> pieces;
};

// The saved ranks' shard files, opened when first needed: their size checked against the
// manifest, their safetensors header parsed; each piece read alone and checked against its hash.
class PieceFiles {
 public:
  PieceFiles(std::string dir, const Manifest& m, int rank) : dir_(std::move(dir)), m_(m), rank_(rank) {}
  ~PieceFiles() {
    for (auto& [r, f] : open_) ::close(f.fd);
  }
  at::Tensor read(const std::string& param, const Piece& piece) {
    File& f = file(piece.rank);
    const std::string name = param + "/" + piece.field;
    const TensorEntry* e = nullptr;
    for (const auto& t : f.header.tensors)
      if (t.name == name) e = &t;
    if (!e) throw CheckpointError(rank_, f.path + " has no tensor \"" + name + "\", which the manifest lists");
    at::Tensor out = at::empty(e->shape, at::TensorOptions().dtype(torch_dtype(e->dtype)));
    if (out.nbytes() != e->end - e->begin) throw CheckpointError(rank_, f.path + ": tensor \"" + name + "\" is damaged");
    read_at(f, static_cast<char*>(out.data_ptr()), out.nbytes(), f.header.data_start + e->begin);
    Hasher h;
    h.update(out.data_ptr(), out.nbytes());
    if (h.digest() != piece.xxh3)
      throw CheckpointError(rank_, f.path + ": tensor \"" + name + "\" does not match its hash in the manifest (the file is damaged)");
    if (!piece.scalar && out.numel() != piece.end - piece.begin)
      throw CheckpointError(rank_, f.path + ": tensor \"" + name + "\" has " + std::to_string(out.numel()) +
                                       " elements, the manifest says " + std::to_string(piece.end - piece.begin));
    mesh_bytes_read() += out.nbytes();
    return out.reshape(-1);
  }

 private:
  struct File {
    int fd = -1;
    std::string path;
    SafetensorsHeader header;
  };
  void read_at(const File& f, char* out, uint64_t bytes, uint64_t offset) const {
    while (bytes > 0) {
      const ssize_t n = ::pread(f.fd, out, bytes, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw CheckpointError(rank_, "could not read " + f.path + (n < 0 ? ": read error" : ": it is truncated"));
      out += n;
      bytes -= static_cast<uint64_t>(n);
      offset += static_cast<uint64_t>(n);
    }
  }
  File& file(int saved_rank) {
    auto it = open_.find(saved_rank);
    if (it != open_.end()) return it->second;
    const ManifestFile* mf = nullptr;
    for (const auto& f : m_.files)
      if (f.role == "shard" && f.rank == saved_rank) mf = &f;
    if (!mf) throw CheckpointError(rank_, dir_ + " has no shard file of rank " + std::to_string(saved_rank));
    File f;
    f.path = dir_ + "/" + mf->name;
    uint64_t bytes = 0;
    f.fd = open_checkpoint_file(f.path, rank_, &bytes);
    File& kept = open_.emplace(saved_rank, std::move(f)).first->second;  // closed by the destructor from here on
    if (bytes != mf->bytes)
      throw CheckpointError(rank_, kept.path + ": " + std::to_string(bytes) + " bytes, the manifest says " + std::to_string(mf->bytes));
    std::string prefix(8, '\0');
    read_at(kept, prefix.data(), 8, 0);
    try {
      const uint64_t need = std::min<uint64_t>(needed_prefix(prefix), bytes);
      prefix.resize(need);
      read_at(kept, prefix.data(), need, 0);
      kept.header = parse_header(prefix, bytes);
    } catch (const CheckpointError&) {
      throw;
    } catch (const std::exception& e) {
      throw CheckpointError(rank_, kept.path + ": " + e.what());
    }
    return kept;
  }
  std::string dir_;
  const Manifest& m_;
  int rank_;
  std::map<int, File> open_;
};

std::map<std::string, SavedParam> parse_saved(const std::string& text, int rank) {
  try {
    const auto j = detail::parse_capped(text);
    std::map<std::string, SavedParam> out;
    for (const auto& [name, p] : j.at("params").items()) {
      SavedParam s;
      s.shape = p.at("shape").get<std::vector<int64_t>>();
      s.tp_dim = p.at("tp_dim").get<int>();
      s.tp = p.at("tp").get<int>();
      s.stage = p.at("stage").get<int>();
      int64_t numel = 1;
      for (int64_t d : s.shape) {
        if (d < 0) throw std::runtime_error("parameter \"" + name + "\" has a negative size");
        numel *= d;
      }
      if (s.tp < 1 || s.tp_dim < -1 || s.tp_dim >= static_cast<int>(s.shape.size()) ||
          (s.tp_dim >= 0 && s.shape[s.tp_dim] % s.tp != 0))
        throw std::runtime_error("parameter \"" + name + "\" has an impossible placement");
      for (const auto& q : p.at("pieces")) {
        Piece piece{q.at("field").get<std::string>(), q.at("rank").get<int>(), q.at("block").get<int>()};
        piece.scalar = q.value("scalar", false);
        if (!piece.scalar) {
          piece.begin = q.at("begin").get<int64_t>();
          piece.end = q.at("end").get<int64_t>();
          if (piece.begin < 0 || piece.end < piece.begin || piece.end > numel / s.tp || piece.block < 0 || piece.block >= s.tp)
            throw std::runtime_error("a piece of parameter \"" + name + "\" lies outside it");
        }
        piece.xxh3 = from_hex(q.at("xxh3").get<std::string>());
        s.pieces.push_back(std::move(piece));
      }
      out[name] = std::move(s);
    }
    return out;
  } catch (const std::exception& e) {
    throw CheckpointError(rank, std::string("the checkpoint's mesh layout is not valid: ") + e.what());
  }
}

}  // namespace

uint64_t& mesh_bytes_read() {
  thread_local uint64_t bytes = 0;
  return bytes;
}

void mesh_restore(MeshCheckpointable& model, torch::optim::Optimizer* optimizer, const std::string& dir,
                  const Manifest& manifest, int rank) {
  torch::NoGradGuard no_grad;
  const auto saved = parse_saved(manifest.sharding_json, rank);
  std::string saved_mesh;  // "pp=1 x dp=2 x tp=1", for messages
  try {
    const auto sharding = detail::parse_capped(manifest.sharding_json);
    for (const auto& d : sharding.at("mesh"))
      saved_mesh += (saved_mesh.empty() ? "" : " x ") + d.at("name").get<std::string>() + "=" + std::to_string(d.at("size").get<int>());
  } catch (const std::exception& e) {
    throw CheckpointError(rank, std::string("the checkpoint's mesh is not valid: ") + e.what());
  }
  if (optimizer && manifest.optimizer_json.empty())
    throw CheckpointError(rank, "the checkpoint holds no optimizer state, but an optimizer was given");
  const DeviceMesh& mesh = model.checkpoint_mesh();
  int tp_size = 1, tp = 0;
  for (const auto& d : mesh.dims())
    if (d.name == "tp") tp_size = d.size, tp = mesh.coordinate("tp");
  PieceFiles files(dir, manifest, rank);
  // Every parameter checked before any is written: a mismatch leaves the model as it was.
  struct Checked {
    const SavedParam* saved;
    std::vector<int64_t> piece;  // this rank's piece's shape
  };
  const std::vector<MeshParameter> params = model.mesh_parameters();
  std::vector<Checked> checked;
  for (const MeshParameter& p : params) {
    const std::string who = "parameter \"" + p.name + "\"";  // CheckpointError names the rank
    const auto it = saved.find(p.name);
    if (it == saved.end())
      throw CheckpointError(rank, who + ": not in the checkpoint (saved on mesh " + saved_mesh + "): it is of another model");
    const SavedParam& s = it->second;
    if (c10::IntArrayRef(s.shape) != c10::IntArrayRef(p.shape))
      throw CheckpointError(rank, who + ": shape " + shape_text(s.shape) + " in the checkpoint, " + shape_text(p.shape) +
                                      " in the model");
    const int k = p.tp_dim;
    std::vector<int64_t> expect = p.shape;
    if (k < -1 || k >= static_cast<int>(p.shape.size()))
      throw CheckpointError(rank, who + ": tp_dim " + std::to_string(k) + " is not a dimension of " + shape_text(p.shape));
    if (k >= 0 && p.shape[k] % tp_size != 0)
      throw CheckpointError(rank, who + ": dimension " + std::to_string(k) + " of " + shape_text(p.shape) + " (" +
                                      std::to_string(p.shape[k]) + ") does not split over tp=" + std::to_string(tp_size));
    if (k >= 0) expect[k] /= tp_size;
    if (p.local.sizes() != c10::IntArrayRef(expect))
      throw CheckpointError(rank, who + ": its piece is " + shape_text(p.local.sizes()) + ", tp=" +
                                      std::to_string(tp_size) + " along dimension " + std::to_string(k) + " gives " +
                                      shape_text(expect));
    checked.push_back({&s, expect});
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const MeshParameter& p = params[i];
    const SavedParam& s = *checked[i].saved;
    const std::vector<int64_t>& expect = checked[i].piece;
    const int k = p.tp_dim;
    const std::string who = "parameter \"" + p.name + "\"";  // CheckpointError names the rank
    // The elements this rank holds, by their place in the whole tensor, and where the saved
    // layout keeps each: its block along the saved tp_dim and its place in that block.
    const int64_t numel = p.local.numel();
    at::Tensor g = at::arange(c10::multiply_integers(p.shape), at::kLong).view(p.shape);
    if (k >= 0) g = g.narrow(k, tp * expect[k], expect[k]);
    g = g.reshape(-1).contiguous();
    at::Tensor block = at::zeros_like(g), place = g;
    if (s.tp_dim >= 0 && s.tp > 1) {
      int64_t inner = 1;
      for (size_t d = s.tp_dim + 1; d < s.shape.size(); ++d) inner *= s.shape[d];
      const int64_t rows = s.shape[s.tp_dim], per = rows / s.tp;
      const at::Tensor row = g.div(inner, "floor").remainder(rows);
      block = row.div(per, "floor");
      place = g.div(rows * inner, "floor") * (per * inner) + row.remainder(per) * inner + g.remainder(inner);
    }
    // Elements [lo, hi) of this rank's flattened piece of `field`, from every saved piece they fall in.
    auto fill = [&](const std::string& field, int64_t lo, int64_t hi, c10::ScalarType dtype) {
      at::Tensor out = at::empty({hi - lo}, at::TensorOptions().dtype(dtype));
      at::Tensor covered = at::zeros({hi - lo}, at::kBool);
      const at::Tensor b = block.slice(0, lo, hi), f = place.slice(0, lo, hi);
      for (const Piece& piece : s.pieces) {
        if (piece.field != field || piece.scalar) continue;
        const at::Tensor sel = ((b == piece.block) & (f >= piece.begin) & (f < piece.end)).nonzero().reshape(-1);
        if (sel.numel() == 0) continue;  // not a byte of it is read
        const at::Tensor data = files.read(p.name, piece).to(dtype);
        out.index_copy_(0, sel, data.index_select(0, f.index_select(0, sel) - piece.begin));
        covered.index_fill_(0, sel, true);
      }
      const int64_t have = covered.sum().item<int64_t>();
      if (have != hi - lo)
        throw CheckpointError(rank, who + ": the checkpoint holds " + std::to_string(have) + " of the " +
                                        std::to_string(hi - lo) + " elements of \"" + field + "\" this rank needs");
      return out;
    };
    p.local.detach().copy_(fill("param", 0, numel, p.local.scalar_type()).view(p.local.sizes()));
    if (!optimizer || !p.optimizer_param.defined()) continue;
    const int64_t off = p.optimizer_offset, held = p.optimizer_param.numel();
    if (off < 0 || off + held > numel)
      throw CheckpointError(rank, who + ": its optimizer's tensor holds elements [" + std::to_string(off) + ", " +
                                      std::to_string(off + held) + ") of a piece of " + std::to_string(numel));
    std::map<std::string, at::Tensor> fields;
    for (const Piece& piece : s.pieces) {
      if (piece.field == "param" || fields.count(piece.field)) continue;
      if (piece.scalar) {
        fields[piece.field] = files.read(p.name, piece).reshape({});
      } else {
        fields[piece.field] =
            fill(piece.field, off, off + held, p.optimizer_param.scalar_type()).view(p.optimizer_param.sizes());
      }
    }
    set_param_state(*optimizer, p.optimizer_param, fields, rank);  // none: saved before the first step
  }
  if (optimizer) apply_optimizer_description(*optimizer, manifest.optimizer_json, rank);
  model.mesh_state_loaded();
}

}  // namespace cohort::ckpt
