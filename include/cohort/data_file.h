// cohort/data_file.h — opening a program's data file (a dataset, a corpus, a parameter file) so that
// bad input is one line instead of a hang or an exhausted memory. Torch-free.
//
// A FIFO given as a data file blocks open() until some writer comes — forever, and before init(),
// so that no hang detector sees it; /dev/zero (or any device) never ends, and reading it into
// memory grows until std::bad_alloc. open_data_file opens without blocking (O_NONBLOCK), accepts
// regular files only (fstat on the open descriptor: no race with a rename) and refuses one larger
// than the reader's cap before anything is read.
#pragma once

#include <cstdint>
#include <string>

namespace cohort {

/// How large a data file a reader takes, and why: a larger file is refused with
/// "<size>, more than the <max_bytes> <what_for>", e.g. what_for = "the example reads into memory;
/// prepare it as shards".
struct DataFileLimit {
  uint64_t max_bytes = 0;  ///< the largest file the reader takes
  std::string what_for;    ///< ends the message about a larger file: "the example reads into memory"
};

/// A data file opened for reading, or why it was not.
struct DataFile {
  int fd = -1;          ///< open, close-on-exec, with blocking reads, when `problem` is empty; the caller closes it
  uint64_t bytes = 0;   ///< its size
  std::string problem;  ///< one line without the file's name: "not a regular file (a FIFO)", "No such file or directory", ...
};

/// Opens `path` (symbolic links followed) when it is a regular file of at most limit.max_bytes.
/// Never blocks on a FIFO.
DataFile open_data_file(const std::string& path, const DataFileLimit& limit);

/// The whole of `path` through open_data_file: true with `text` set, or false with `problem` set
/// (also when reading fails midway).
bool read_data_file(const std::string& path, const DataFileLimit& limit, std::string& text, std::string& problem);

/// A byte count for messages: "900 bytes", "1 KiB", "5.2 GiB".
std::string byte_size_text(uint64_t bytes);

}  // namespace cohort
