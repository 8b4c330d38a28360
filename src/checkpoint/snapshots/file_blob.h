// checkpoint/snapshots/file_blob.h — several files as one byte string, for sending a snapshot's
// files from one machine to another over the job's process groups (snapshot_sharing.h,
// buddy_copies.h): an 8-byte length, a JSON index [{name, bytes, xxh3}], then the files' bytes in
// index order. The receiver checks each file's size and XXH3-64 on arrival; what the files must be
// (their names, the manifest's records) is the caller's to check. No torch here.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cohort::ckpt {

struct NamedBytes {
  std::string name;
  std::string bytes;
};

/// The blob of `files`. COHORT_TEST_DAMAGE_BLOB=<tag> with the caller's `tag` (a test's fault
/// injection) changes the blob's last byte on the way.
std::string pack_files(const std::vector<NamedBytes>& files, const char* tag);

/// The files of a blob, as views into it; `problem` says what is malformed or damaged (then no
/// file is given).
struct UnpackedFiles {
  std::vector<std::pair<std::string, std::string_view>> files;
  std::string problem;
};
UnpackedFiles unpack_files(const char* blob, size_t size);

}  // namespace cohort::ckpt
