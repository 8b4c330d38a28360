#include "checkpoint/tensor_file.h"

#include <ATen/Functions.h>  // from_blob

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/manifest.h"
#include "cohort/error.h"

namespace cohort::ckpt {

std::string safetensors_dtype(c10::ScalarType type, int rank) {
  switch (type) {
    case c10::kDouble: return "F64";
    case c10::kFloat: return "F32";
    case c10::kHalf: return "F16";
    case c10::kBFloat16: return "BF16";
    case c10::kLong: return "I64";
    case c10::kInt: return "I32";
    case c10::kShort: return "I16";
    case c10::kChar: return "I8";
    case c10::kByte: return "U8";
    case c10::kBool: return "BOOL";
    default:
      throw CheckpointError(rank, std::string("cannot checkpoint tensors of type ") + c10::toString(type) +
                                      " (safetensors has no such dtype)");
  }
}

c10::ScalarType torch_dtype(const std::string& dtype) {
  static const std::map<std::string, c10::ScalarType> kTypes{
      {"F64", c10::kDouble}, {"F32", c10::kFloat}, {"F16", c10::kHalf}, {"BF16", c10::kBFloat16},
      {"I64", c10::kLong},   {"I32", c10::kInt},   {"I16", c10::kShort}, {"I8", c10::kChar},
      {"U8", c10::kByte},    {"BOOL", c10::kBool}};
  const auto it = kTypes.find(dtype);
  return it == kTypes.end() ? c10::ScalarType::Undefined : it->second;
}

FileRecord write_tensor_file(const std::string& dir, const std::string& name, const NamedTensors& tensors, int rank) {
  std::vector<TensorEntry> entries;
  entries.reserve(tensors.size());
  for (const auto& [tensor_name, t] : tensors) {
    COHORT_CHECK(t.is_contiguous() && t.device().is_cpu(), "snapshot tensor " << tensor_name << " not CPU-contiguous");
    entries.push_back({tensor_name, safetensors_dtype(t.scalar_type(), rank), t.sizes().vec(), 0, 0});
  }
  const std::string header = build_header(entries, {{"format", "pt"}, {"writer", "cohort"}});
  AtomicWriter out(dir, name, rank);
  out.write(header.data(), header.size());
  for (const auto& [tensor_name, t] : tensors) out.write(t.data_ptr(), t.nbytes());
  return out.finish();
}

LoadedFile::LoadedFile(const std::string& dir, const ManifestFile& expected, int rank) : name_(expected.name) {
  contents_ = read_file(dir + "/" + expected.name, rank);
  const std::string problem = check_file_contents(expected, contents_.data.get(), contents_.bytes, contents_.xxh3);
  if (!problem.empty()) throw CheckpointError(rank, problem);
  const std::string first(contents_.data.get(), std::min<uint64_t>(contents_.bytes, 8));
  const SafetensorsHeader header =
      parse_header(std::string(contents_.data.get(), needed_prefix(first)), contents_.bytes);
  char* data = contents_.data.get() + header.data_start;
  for (const auto& e : header.tensors) {
    const c10::ScalarType type = torch_dtype(e.dtype);
    tensors_[e.name] = at::from_blob(data + e.begin, e.shape, at::TensorOptions().dtype(type));
  }
}

}  // namespace cohort::ckpt
