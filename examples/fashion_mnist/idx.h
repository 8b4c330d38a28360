// idx.h — reading IDX files (the MNIST / Fashion-MNIST format), gzipped or not. Part of the
// example, not of cohort's API: a data reader is the program's business.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace cohort {

/// Reads an IDX file (`path`, or `path` + ".gz" when only that exists) into a tensor of its
/// element type and shape. Throws cohort::ConfigError naming the file when it is missing, not a
/// regular file (a FIFO, a device: cohort/data_file.h), truncated, not IDX, or when its header
/// declares more than 1 GiB of data (checked before the allocation it asks for). `rank` only
/// labels the error message.
at::Tensor read_idx(const std::string& path, int rank = -1);

}  // namespace cohort
