#include "checkpoint/format/tensor_file.h"

#include <ATen/Functions.h>  // empty
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "checkpoint/storage/checkpoint_dir.h"
#include "checkpoint/format/manifest.h"
#include "cohort/error.h"
#include "runtime/check.h"

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

std::string tensor_file_header(const NamedTensors& tensors, int rank, uint64_t* file_bytes) {
  std::vector<TensorEntry> entries;
  entries.reserve(tensors.size());
  uint64_t data = 0;
  for (const auto& [tensor_name, t] : tensors) {
    entries.push_back({tensor_name, safetensors_dtype(t.scalar_type(), rank), t.sizes().vec(), 0, 0});
    data += t.nbytes();
  }
  std::string header = build_header(entries, {{"format", "pt"}, {"writer", "cohort"}});
  if (file_bytes) *file_bytes = header.size() + data;
  return header;
}

FileRecord write_tensor_file(const std::string& dir, const std::string& name, const NamedTensors& tensors, int rank,
                             bool allow_direct, const std::string& reuse) {
  for (const auto& [tensor_name, t] : tensors)
    COHORT_CHECK(t.is_contiguous() && t.device().is_cpu(), "snapshot tensor " << tensor_name << " not CPU-contiguous");
  const std::string header = tensor_file_header(tensors, rank, nullptr);
  AtomicWriter out(dir, name, rank, allow_direct, reuse);
  out.write(header.data(), header.size());
  for (const auto& [tensor_name, t] : tensors) out.write(t.data_ptr(), t.nbytes());
  return out.finish();
}

namespace {

constexpr size_t kVerifyChunk = 4u << 20;

// XXH3-64 of each tensor's bytes as the file streams past: tensors lie back to back in data order.
class PerTensorHashes {
 public:
  PerTensorHashes(const SafetensorsHeader& h) : header_(h), out_(h.tensors.size()) {}
  void feed(const char* p, uint64_t off, uint64_t n) {  // bytes [off, off + n) of the file
    while (k_ < header_.tensors.size()) {
      const uint64_t b = header_.data_start + header_.tensors[k_].begin, e = header_.data_start + header_.tensors[k_].end;
      if (off >= e) {  // the tensor is complete (or empty)
        out_[k_++] = hasher_->digest();
        hasher_ = std::make_unique<Hasher>();
        continue;
      }
      if (n == 0) return;
      const uint64_t skip = off < b ? std::min(n, b - off) : 0;
      const uint64_t take = std::min(n - skip, e - (off + skip));
      hasher_->update(p + skip, take);
      p += skip + take;
      off += skip + take;
      n -= skip + take;
    }
  }
  std::vector<uint64_t> finish(uint64_t file_bytes) {
    feed(nullptr, file_bytes, 0);
    return out_;
  }

 private:
  const SafetensorsHeader& header_;
  std::vector<uint64_t> out_;
  size_t k_ = 0;
  std::unique_ptr<Hasher> hasher_ = std::make_unique<Hasher>();
};

}  // namespace

TensorFileReader::TensorFileReader(const std::string& dir, const ManifestFile& expected, int rank)
    : name_(expected.name), path_(dir + "/" + expected.name), rank_(rank) {
  uint64_t bytes = 0;
  fd_ = open_checkpoint_file(path_, rank, &bytes);  // regular files only
  try {
    verify(expected);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

// One pass over the file: its size and hash (checked against the manifest), the header's bytes,
// and each tensor's own hash, which every later read is checked against.
void TensorFileReader::verify(const ManifestFile& expected) {
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) throw CheckpointError(rank_, path_ + " is not a regular file");
  if (static_cast<uint64_t>(st.st_size) != expected.bytes) {  // before reading a byte of it
    const std::string problem = check_file_contents(expected, "", static_cast<uint64_t>(st.st_size), 0);
    throw CheckpointError(rank_, problem);
  }
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<char[]> buf(new char[kVerifyChunk]);
  Hasher hasher;
  std::string prefix;
  std::unique_ptr<PerTensorHashes> per_tensor;
  uint64_t want = 8, total = 0;
  for (;;) {
    const ssize_t n = ::read(fd_, buf.get(), kVerifyChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      throw CheckpointError(rank_, "could not read " + path_ + ": " + std::strerror(err));
    }
    if (n == 0) break;
    hasher.update(buf.get(), static_cast<size_t>(n));
    for (size_t at = 0; prefix.size() < want && at < static_cast<size_t>(n);) {
      const size_t take = std::min<size_t>(want - prefix.size(), static_cast<size_t>(n) - at);
      prefix.append(buf.get() + at, take);
      at += take;
      if (prefix.size() == 8 && want == 8) {
        try {
          want = std::max<uint64_t>(8, needed_prefix(prefix));
        } catch (const std::exception&) {
          want = 8;  // check_file_contents names the problem
        }
      }
      if (prefix.size() == want && want > 8 && !per_tensor) {
        try {
          header_ = parse_header(prefix, static_cast<uint64_t>(st.st_size));
          per_tensor = std::make_unique<PerTensorHashes>(header_);
        } catch (const std::exception&) {
          want = 8;  // check_file_contents names the problem
        }
      }
    }
    if (per_tensor) per_tensor->feed(buf.get(), total, static_cast<uint64_t>(n));
    total += static_cast<uint64_t>(n);
  }
  // check_file_contents reads the header from the first min(8 + N, size) bytes: `prefix` holds them.
  const std::string problem = check_file_contents(expected, prefix.data(), total, hasher.digest());
  if (!problem.empty()) throw CheckpointError(rank_, problem);
  if (!per_tensor || total != static_cast<uint64_t>(st.st_size))
    throw CheckpointError(rank_, path_ + " changed while it was being verified");
  tensor_xxh3_ = per_tensor->finish(total);
}

TensorFileReader::~TensorFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorEntry* TensorFileReader::find(const std::string& tensor) const {
  for (const auto& e : header_.tensors)
    if (e.name == tensor) return &e;
  return nullptr;
}

void TensorFileReader::pread_all(char* out, uint64_t bytes, uint64_t offset) const {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : 0;
      throw CheckpointError(rank_, "could not read " + path_ + (n < 0 ? std::string(": ") + std::strerror(err)
                                                                      : std::string(": it was truncated while being restored")));
    }
    out += n;
    bytes -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

void TensorFileReader::read_into(const TensorEntry& e, const at::Tensor& dst) const {
  const c10::ScalarType type = torch_dtype(e.dtype);
  int64_t numel = 1;
  for (int64_t d : e.shape) numel *= d;
  COHORT_CHECK(dst.numel() == numel, "reading " << e.name << " of " << numel << " elements into " << dst.numel());
  if (dst.device().is_cpu() && dst.is_contiguous() && dst.scalar_type() == type) {
    read_verified(e, static_cast<char*>(dst.data_ptr()));
  } else {
    dst.copy_(read(e).view(dst.sizes()));
  }
}

at::Tensor TensorFileReader::read(const TensorEntry& e) const {
  at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(torch_dtype(e.dtype)));
  read_verified(e, static_cast<char*>(t.data_ptr()));
  return t;
}

void TensorFileReader::read_verified(const TensorEntry& e, char* out) const {
  const uint64_t bytes = e.end - e.begin;
  pread_all(out, bytes, header_.data_start + e.begin);
  Hasher h;
  h.update(out, bytes);
  const size_t k = static_cast<size_t>(&e - header_.tensors.data());
  COHORT_CHECK(k < tensor_xxh3_.size(), "tensor entry of another file");
  if (h.digest() != tensor_xxh3_[k])
    throw CheckpointError(rank_, path_ + ": tensor \"" + e.name + "\" changed on disk between its verification and "
                                 "its restore (another process wrote the file); the restore is abandoned and the "
                                 "state may be partly restored: start again");
}

}  // namespace cohort::ckpt
