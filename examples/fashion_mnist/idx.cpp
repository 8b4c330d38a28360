// IDX reader: a 4-byte magic (0, 0, type, ndim), ndim big-endian uint32 sizes, then the data.
// zlib's gzread reads gzipped and plain files alike.
#include "idx.h"

#include <ATen/ATen.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <memory>
#include <vector>

#include "cohort/data_file.h"
#include "cohort/error.h"

namespace cohort {
namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// What the example reads into memory at most, per file: the Fashion-MNIST training images are
// 47 MiB; a header that claims more is refused before the allocation it asks for.
const DataFileLimit kLimit{1ull << 30, "the example reads into memory"};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? " x " : "") + std::to_string(shape[i]);
  return s;
}

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
}

}  // namespace

at::Tensor read_idx(const std::string& path, int rank) {
  std::string file = path;
  if (!exists(file) && exists(path + ".gz")) file = path + ".gz";
  if (!exists(file)) throw ConfigError(rank, "IDX file not found: " + path + " (nor " + path + ".gz)");
  // A FIFO or a device is refused here (reading it would block or never end); so is a file whose
  // compressed size alone is over the cap.
  const DataFile opened = open_data_file(file, kLimit);
  if (opened.fd < 0) throw ConfigError(rank, "IDX file " + file + ": " + opened.problem);
  std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzdopen(opened.fd, "rb"), gzclose);
  if (!gz) {
    ::close(opened.fd);  // gzdopen leaves it open when it fails
    throw ConfigError(rank, "cannot open IDX file " + file);
  }
  auto read = [&](void* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      int r = gzread(gz.get(), static_cast<char*>(dst) + got, static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30)));
      if (r <= 0) throw ConfigError(rank, "IDX file " + file + " is truncated or corrupt");
      got += static_cast<size_t>(r);
    }
  };
  std::array<unsigned char, 4> magic{};
  read(magic.data(), 4);
  if (magic[0] != 0 || magic[1] != 0 || magic[3] == 0) throw ConfigError(rank, file + " is not an IDX file");
  at::ScalarType type;
  switch (magic[2]) {
    case 0x08: type = at::kByte; break;
    case 0x09: type = at::kChar; break;
    case 0x0B: type = at::kShort; break;
    case 0x0C: type = at::kInt; break;
    case 0x0D: type = at::kFloat; break;
    case 0x0E: type = at::kDouble; break;
    default: throw ConfigError(rank, file + " has an unknown IDX element type");
  }
  std::vector<int64_t> shape(magic[3]);
  uint64_t data_bytes = at::elementSize(type);
  bool overflow = false;
  for (auto& d : shape) {
    unsigned char b[4];
    read(b, 4);
    d = big_endian(b);
    overflow = overflow || __builtin_mul_overflow(data_bytes, static_cast<uint64_t>(d), &data_bytes);
  }
  // The header's sizes decide the allocation: check them before trusting them.
  if (overflow || data_bytes > kLimit.max_bytes)
    throw ConfigError(rank, "IDX file " + file + " declares a " + shape_text(shape) + " array (" +
                                (overflow ? std::string("more than 16 EiB") : byte_size_text(data_bytes)) + "), more than the " +
                                byte_size_text(kLimit.max_bytes) + " " + kLimit.what_for);
  const uint64_t header = 4 + 4 * shape.size();
  // Uncompressed, the file must hold what the header promises; gzipped, deflate's best ratio
  // (1032:1) bounds what its bytes can expand to.
  const uint64_t can_hold = gzdirect(gz.get()) ? opened.bytes - header : opened.bytes * 1032;
  if (data_bytes > can_hold)
    throw ConfigError(rank, "IDX file " + file + " is truncated or corrupt: it declares a " + shape_text(shape) + " array (" +
                                byte_size_text(data_bytes) + ") in " + byte_size_text(opened.bytes));
  auto t = at::empty(shape, at::TensorOptions().dtype(type));
  read(t.data_ptr(), t.nbytes());
  if (t.element_size() > 1) {
    // IDX stores multi-byte values big-endian; this machine is little-endian.
    auto bytes = t.view(at::kByte).view({-1, static_cast<int64_t>(t.element_size())});
    bytes.copy_(bytes.flip({1}));
  }
  return t;
}

}  // namespace cohort
