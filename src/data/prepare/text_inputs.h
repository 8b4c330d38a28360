// data/prepare/text_inputs.h — the text files a `cohort data prepare` reads, and their contents in
// chunks that end at a line's end (so that a chunk tokenizes the same on any thread). Torch-free.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace cohort::data {

/// A text file to prepare.
struct InputFile {
  std::string path;
  uint64_t bytes = 0;
};

/// The files `paths` name: a file as given (a binary one is an error), a directory walked
/// recursively in sorted order (regular files only: symbolic links and hidden files are left out,
/// binary files are skipped and named in `skipped`). Throws std::runtime_error with one line naming
/// the path: missing, not a file or directory, binary.
std::vector<InputFile> list_text_inputs(const std::vector<std::string>& paths, std::vector<std::string>& skipped);

/// Reads a file in chunks of about `chunk_bytes` that end at a newline (or the file's end).
class ChunkReader {
 public:
  ChunkReader(const std::string& path, uint64_t chunk_bytes);
  ~ChunkReader();
  ChunkReader(const ChunkReader&) = delete;
  ChunkReader& operator=(const ChunkReader&) = delete;
  /// The next chunk into `out`; false at the end. Throws std::runtime_error naming the file for a
  /// read error or a NUL byte (binary data in a text file).
  bool next(std::string& out);

 private:
  std::string path_;
  uint64_t chunk_bytes_;
  std::FILE* file_ = nullptr;
  std::string carry_;  // the part after the last newline of the previous read
  uint64_t offset_ = 0;
  bool eof_ = false;
};

/// Whether `bytes` look binary: a NUL byte among them.
bool looks_binary(const std::string& bytes);

}  // namespace cohort::data
