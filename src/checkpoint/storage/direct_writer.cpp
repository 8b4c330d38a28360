#include "checkpoint/storage/direct_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace cohort::ckpt {
namespace {

// Aligned buffers are kept for the process's life and reused by the next file: a fresh 8 MiB
// allocation would be page-faulted (allocated and cleared by the kernel) on every checkpoint,
// which is the very cost O_DIRECT avoids. At most kBuffers per file being written at once.
std::mutex g_pool_mu;
std::vector<char*> g_pool;

char* take_buffer() {
  {
    std::lock_guard<std::mutex> lock(g_pool_mu);
    if (!g_pool.empty()) {
      char* b = g_pool.back();
      g_pool.pop_back();
      return b;
    }
  }
  void* p = std::aligned_alloc(DirectWriter::kAlign, DirectWriter::kBufferBytes);
  if (!p) throw std::bad_alloc();
  return static_cast<char*>(p);
}

void give_buffer(char* b) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pool.push_back(b);
}

size_t round_up(size_t n) { return (n + DirectWriter::kAlign - 1) / DirectWriter::kAlign * DirectWriter::kAlign; }

}  // namespace

DirectWriter::DirectWriter(int fd) : fd_(fd), buffers_(kBuffers) {
  for (auto& b : buffers_) {
    b.data = take_buffer();
    free_.push_back(&b);
  }
  io_ = std::thread([this] { io_loop(); });
}

DirectWriter::~DirectWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  io_.join();
  for (auto& b : buffers_) give_buffer(b.data);
}

uint64_t DirectWriter::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::min(written_, logical_bytes_);  // without the last block's padding
}

DirectWriter::Buffer* DirectWriter::take_free() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty() || error_ != 0; });
  if (error_ != 0) return nullptr;
  Buffer* b = free_.front();
  free_.pop_front();
  return b;
}

void DirectWriter::submit(Buffer* buffer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    full_.push_back(buffer);
  }
  cv_.notify_all();
}

int DirectWriter::write(const char* data, size_t bytes) {
  while (bytes > 0) {
    if (!current_) {
      current_ = take_free();
      if (!current_) break;  // an earlier write failed
      current_->used = 0;
      current_->offset = next_offset_;
    }
    const size_t n = std::min(bytes, kBufferBytes - current_->used);
    std::memcpy(current_->data + current_->used, data, n);
    current_->used += n;
    logical_bytes_ += n;
    data += n;
    bytes -= n;
    if (current_->used == kBufferBytes) {
      next_offset_ += kBufferBytes;
      submit(std::exchange(current_, nullptr));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

int DirectWriter::finish() {
  if (current_ && current_->used > 0) {
    // The last, partial block: zeros up to the block size for O_DIRECT, cut off again below.
    const size_t padded = round_up(current_->used);
    std::memset(current_->data + current_->used, 0, padded - current_->used);
    submit(std::exchange(current_, nullptr));
  } else if (current_) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(std::exchange(current_, nullptr));
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return error_ != 0 || free_.size() == buffers_.size(); });
  if (error_ != 0) return error_;
  if (logical_bytes_ % kAlign != 0 && ::ftruncate(fd_, static_cast<off_t>(logical_bytes_)) != 0) error_ = errno;
  return error_;
}

void DirectWriter::io_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !full_.empty(); });
    if (stop_) return;
    Buffer* b = full_.front();
    full_.pop_front();
    const bool failed = error_ != 0;  // after a failure nothing more is written
    lock.unlock();
    const int err = failed ? 0 : write_out(*b);
    lock.lock();
    if (err != 0 && error_ == 0) error_ = err;
    free_.push_back(b);
    cv_.notify_all();
  }
}

int DirectWriter::write_out(const Buffer& b) {
  size_t length = direct_ ? round_up(b.used) : b.used;
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pwrite(fd_, b.data + done, length - done, static_cast<off_t>(b.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && direct_) {
      // The device wants another alignment: the rest of this file goes through the page cache.
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) return errno;
      direct_ = false;
      length = b.used;
      continue;
    }
    if (n < 0) return errno;
    if (n == 0) return ENOSPC;
    done += static_cast<size_t>(n);
    std::lock_guard<std::mutex> lock(mu_);
    written_ += static_cast<uint64_t>(n);
  }
  return 0;
}

}  // namespace cohort::ckpt
