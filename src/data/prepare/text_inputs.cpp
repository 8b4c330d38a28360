// Listing and reading a prepare's text inputs. See text_inputs.h.
#include "data/prepare/text_inputs.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace cohort::data {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kSniffBytes = 64 * 1024;  // as git and grep decide "binary": a NUL early on

std::string head_of(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": " + std::strerror(errno));
  std::string head(kSniffBytes, '\0');
  head.resize(std::fread(&head[0], 1, head.size(), f));
  std::fclose(f);
  return head;
}

}  // namespace

bool looks_binary(const std::string& bytes) { return bytes.find('\0') != std::string::npos; }

std::vector<InputFile> list_text_inputs(const std::vector<std::string>& paths, std::vector<std::string>& skipped) {
  std::vector<InputFile> files;
  for (const auto& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) throw std::runtime_error(p + ": no such file or directory");
    if (fs::is_regular_file(st)) {
      if (looks_binary(head_of(p))) {
        throw std::runtime_error(p + ": binary data (a NUL byte), not text; prepare takes text files (records: --records or --idx)");
      }
      files.push_back({p, static_cast<uint64_t>(fs::file_size(p))});
      continue;
    }
    if (!fs::is_directory(st)) throw std::runtime_error(p + ": not a file or directory");
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_symlink() || !it->is_regular_file()) continue;  // links: duplicates (fortunes' *.u8)
      found.push_back(it->path().string());
    }
    if (ec) throw std::runtime_error(p + ": " + ec.message());
    std::sort(found.begin(), found.end());
    for (const auto& f : found) {
      if (looks_binary(head_of(f))) {
        skipped.push_back(f);
        continue;
      }
      files.push_back({f, static_cast<uint64_t>(fs::file_size(f))});
    }
  }
  return files;
}

ChunkReader::ChunkReader(const std::string& path, uint64_t chunk_bytes) : path_(path), chunk_bytes_(chunk_bytes) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw std::runtime_error(path + ": " + std::strerror(errno));
}

ChunkReader::~ChunkReader() {
  if (file_) std::fclose(file_);
}

bool ChunkReader::next(std::string& out) {
  out.swap(carry_);
  carry_.clear();
  while (!eof_ && out.size() < chunk_bytes_) {
    const size_t before = out.size();
    out.resize(before + chunk_bytes_);
    const size_t n = std::fread(&out[before], 1, chunk_bytes_, file_);
    out.resize(before + n);
    if (n < chunk_bytes_) {
      if (std::ferror(file_)) throw std::runtime_error(path_ + ": read failed: " + std::strerror(errno));
      eof_ = true;
    }
    const size_t nul = out.find('\0', before);
    if (nul != std::string::npos) {
      throw std::runtime_error(path_ + ": binary data (a NUL byte at offset " + std::to_string(offset_ + nul) +
                               "), not text");
    }
  }
  if (!eof_) {  // cut after the last newline; the rest starts the next chunk
    const size_t nl = out.rfind('\n');
    if (nl != std::string::npos) {
      carry_.assign(out, nl + 1, std::string::npos);
      out.resize(nl + 1);
    }
  }
  offset_ += out.size();
  return !out.empty();
}

}  // namespace cohort::data
