#include "data/corpus.h"

#include <cohort/data_file.h>
#include <cohort/error.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace {

// The example holds the corpus in memory, in a few copies (the text, the splits, the tokens).
const cohort::DataFileLimit kLimit{1ull << 30, "the example reads into memory; give it a part of the text"};

// A FIFO or a device is refused (a FIFO would block before init(), where no hang detector looks;
// /dev/zero would grow until std::bad_alloc), as is a file over the cap.
std::string read_whole(const std::string& label, const fs::path& file, int rank) {
  std::string text, problem;
  if (!cohort::read_data_file(file.string(), kLimit, text, problem)) throw cohort::ConfigError(rank, label + ": " + problem);
  return text;
}

torch::Tensor to_tokens(const std::string& text) {
  auto t = torch::empty({static_cast<int64_t>(text.size())}, torch::kUInt8);
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(t.data_ptr<uint8_t>()));
  return t;
}

double entropy_of(const torch::Tensor& tokens) {
  const auto counts = torch::bincount(tokens.to(torch::kLong), {}, 256).to(torch::kDouble);
  const auto p = counts / counts.sum();
  const auto nz = p.masked_select(p > 0);
  return -(nz * nz.log()).sum().item<double>();
}

}  // namespace

Corpus load_corpus(const std::string& path, int rank) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw cohort::ConfigError(rank, "corpus " + path + " does not exist (install Debian's fortunes package, or pass "
                                    "--corpus FILE_OR_DIRECTORY)");
  std::vector<fs::path> files;
  const bool directory = fs::is_directory(status);
  if (directory) {
    for (const auto& e : fs::directory_iterator(path, ec)) {
      // The .u8 names are symbolic links to the same files; .dat files are strfile's indexes.
      // Anything else but a subdirectory is read, and must be a regular file (read_whole).
      if (e.is_symlink() || e.is_directory() || e.path().extension() == ".dat") continue;
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::string train, val;
  size_t records = 0;
  uint64_t total = 0;
  for (const auto& f : files) {
    const std::string text = read_whole(directory ? "corpus file " + f.string() : "--corpus " + path, f, rank);
    if ((total += text.size()) > kLimit.max_bytes)
      throw cohort::ConfigError(rank, "--corpus " + path + ": more than the " + cohort::byte_size_text(kLimit.max_bytes) +
                                          " " + kLimit.what_for + " (in its first " + std::to_string(&f - files.data() + 1) +
                                          " files)");
    std::istringstream lines(text);
    std::string record, line;
    auto flush = [&] {
      if (record.empty()) return;
      (records++ % 20 == 19 ? val : train) += record;
      record.clear();
    };
    while (std::getline(lines, line)) {
      record += line + "\n";
      if (line == "%") flush();  // the separator stays with the fortune it ends
    }
    flush();
  }
  if (train.size() + val.size() < 1024)
    throw cohort::ConfigError(rank, "corpus " + path + " holds no text to learn from (" +
                                        std::to_string(train.size() + val.size()) + " bytes in " +
                                        std::to_string(files.size()) + " files; at least 1 KiB is needed)");
  if (records < 20) {  // text without fortune separators: the last 5% is held out
    std::string all = train + val;
    const size_t cut = all.size() * 19 / 20;
    train = all.substr(0, cut);
    val = all.substr(cut);
  }
  Corpus c;
  c.train = to_tokens(train);
  c.val = to_tokens(val);
  c.files = static_cast<int64_t>(files.size());
  c.unigram_entropy = entropy_of(c.train);
  return c;
}

TokenWindows::TokenWindows(torch::Tensor tokens, int64_t seq_len)
    : tokens_(std::move(tokens)), seq_len_(seq_len), count_(std::max<int64_t>(0, (tokens_.numel() - 1) / seq_len)) {}

torch::data::Example<> TokenWindows::get_batch(std::vector<size_t> indices) {
  auto starts = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kLong) * seq_len_;
  auto idx = starts.unsqueeze(1) + torch::arange(seq_len_ + 1, torch::kLong).unsqueeze(0);  // [B, T + 1]
  auto window = tokens_.index({idx}).to(torch::kLong);
  return {window.narrow(1, 0, seq_len_), window.narrow(1, 1, seq_len_)};
}
