// `cohort data prepare --idx`: IDX files (LeCun's format: Fashion-MNIST, MNIST), gzipped or not,
// read side by side into records (image bytes, then the label byte). See prepare.h.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include "data/prepare/prepare.h"
#include "data/prepare/shard_writer.h"

namespace cohort::data {
namespace {

// One IDX file: a header of magic (0, 0, type, dimensions), big-endian uint32 sizes, then items.
struct IdxInput {
  std::string path;
  gzFile file = nullptr;
  uint64_t items = 0;
  uint64_t item_bytes = 1;
  ~IdxInput() {
    if (file) gzclose(file);
  }
  void read(uint8_t* out, uint64_t bytes) {
    while (bytes > 0) {
      const unsigned n = static_cast<unsigned>(std::min<uint64_t>(bytes, 1u << 30));
      const int got = gzread(file, out, n);
      if (got <= 0) {
        int err = 0;
        const char* msg = gzerror(file, &err);
        throw std::runtime_error(path + ": " + (got == 0 ? std::string("truncated (fewer items than its header says)") : msg));
      }
      out += got;
      bytes -= static_cast<uint64_t>(got);
    }
  }
};

std::unique_ptr<IdxInput> open_idx(const std::string& path) {
  auto in = std::make_unique<IdxInput>();
  in->path = path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw std::runtime_error(path + ": not a regular file");
  in->file = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (!in->file) throw std::runtime_error(path + ": cannot open");
  uint8_t magic[4];
  in->read(magic, 4);
  if (magic[0] != 0 || magic[1] != 0 || magic[3] == 0 || magic[3] > 8) {
    throw std::runtime_error(path + ": not an IDX file (its magic is not 0 0 TYPE DIMENSIONS)");
  }
  if (magic[2] != 0x08) throw std::runtime_error(path + ": IDX items of type " + std::to_string(magic[2]) + "; only unsigned bytes (type 8) are supported");
  for (int d = 0; d < magic[3]; ++d) {
    uint8_t b[4];
    in->read(b, 4);
    const uint64_t size = uint64_t{b[0]} << 24 | uint64_t{b[1]} << 16 | uint64_t{b[2]} << 8 | b[3];
    if (d == 0) {
      in->items = size;
    } else {
      if (size == 0 || in->item_bytes > (uint64_t{1} << 30) / size) throw std::runtime_error(path + ": items of 0 or over 1 GiB");
      in->item_bytes *= size;
    }
  }
  return in;
}

}  // namespace

Manifest prepare_idx_records(const PrepareOptions& o, std::ostream& log) {
  std::vector<std::unique_ptr<IdxInput>> inputs;
  uint64_t record = 0;
  for (const auto& p : o.inputs) {
    inputs.push_back(open_idx(p));
    record += inputs.back()->item_bytes;
    if (inputs.back()->items != inputs.front()->items) {
      throw std::runtime_error(p + ": " + std::to_string(inputs.back()->items) + " items, but " + inputs.front()->path +
                               " has " + std::to_string(inputs.front()->items) + " (IDX files side by side have as many)");
    }
  }
  if (inputs.front()->items == 0) throw std::runtime_error(inputs.front()->path + ": no items");
  std::error_code ec;
  std::filesystem::create_directories(o.out, ec);
  if (std::filesystem::exists(o.out + "/manifest.json")) {
    throw std::runtime_error(o.out + " already holds a prepared data set (manifest.json); choose another --out or remove it");
  }
  Manifest base;
  base.kind = "records";
  base.item_bytes = record;
  ShardWriter writer(o.out, base, o.shard_bytes);
  const uint64_t per_round = std::max<uint64_t>(1, (8ull << 20) / record);
  std::vector<uint8_t> buffer, item;
  for (uint64_t left = inputs.front()->items; left > 0;) {
    const uint64_t n = std::min(left, per_round);
    buffer.resize(n * record);
    uint64_t at = 0;
    for (auto& in : inputs) {  // file by file, then interleave: one gzread per file and round
      item.resize(n * in->item_bytes);
      in->read(item.data(), item.size());
      for (uint64_t i = 0; i < n; ++i) std::memcpy(&buffer[i * record + at], &item[i * in->item_bytes], in->item_bytes);
      at += in->item_bytes;
    }
    writer.add_records(buffer.data(), n);
    left -= n;
  }
  Manifest m = writer.finish();
  log << "prepare: " << m.items() << " records of " << record << " bytes (IDX), " << m.shards.size() << " shard(s) in "
      << o.out << "\n";
  return m;
}

}  // namespace cohort::data
