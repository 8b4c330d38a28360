// DirectWriter: the bytes of one checkpoint file written with O_DIRECT, straight from block-aligned
// buffers to the device, the copy into the next buffer overlapping the write of the last.
//
// Why: a buffered write copies every byte into the page cache (pages the kernel must first
// allocate and clear), and the fsync that makes it durable then writes them out; with O_DIRECT the
// device reads the buffer itself and no page is allocated. Measured on the build machine's virtio
// disk: `dd bs=4M oflag=direct conv=fsync` 1.7-2.6 GB/s against 0.5-1.3 GB/s buffered with
// fsync (docs/BENCHMARKS.md, checkpoints). The caller's memory is not block-aligned (tensors are
// 64-byte aligned, and safetensors packs them after a header of any length), so the bytes pass
// through a few aligned buffers: the caller copies into one while an I/O thread writes another.
//
// O_DIRECT needs the buffer, the file offset and the length to be multiples of the device's block
// size: buffers are 4096-aligned and full ones are multiples of 4096; the last one is padded with
// zeros and the file truncated to its real length by finish(). Where a write is refused as
// unaligned (EINVAL: a device with larger blocks), O_DIRECT is turned off for that file and the
// same write is done through the page cache; nothing is lost or written twice.
// Not here: opening (AtomicWriter opens with O_DIRECT where the file system takes it), fsync,
// rename and hashing (AtomicWriter). Internal header, no torch.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace cohort::ckpt {

class DirectWriter {
 public:
  static constexpr size_t kAlign = 4096;
  static constexpr size_t kBufferBytes = 8u << 20;
  static constexpr int kBuffers = 3;

  /// `fd` is open for writing with O_DIRECT; it stays the caller's (not closed here).
  explicit DirectWriter(int fd);
  /// Stops the I/O thread; pending bytes are dropped (the caller removes the file).
  ~DirectWriter();
  DirectWriter(const DirectWriter&) = delete;
  DirectWriter& operator=(const DirectWriter&) = delete;

  /// Copies `bytes` in. Returns 0, or the errno of a write that failed (this or an earlier one),
  /// after which nothing more is written.
  int write(const char* data, size_t bytes);
  /// Writes the rest, waits for every write, and truncates the padding. Returns 0 or an errno.
  int finish();
  /// Bytes the device has taken so far (for error messages).
  uint64_t bytes_written() const;

 private:
  struct Buffer {
    char* data = nullptr;
    size_t used = 0;
    uint64_t offset = 0;
  };
  Buffer* take_free();          // waits for a buffer the I/O thread has written
  void submit(Buffer* buffer);  // hands a buffer to the I/O thread
  void io_loop();
  int write_out(const Buffer& buffer);  // one buffer to the file; 0 or an errno

  int fd_;
  std::vector<Buffer> buffers_;
  Buffer* current_ = nullptr;
  uint64_t next_offset_ = 0;  // where the current buffer's first byte goes
  uint64_t logical_bytes_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Buffer*> free_, full_;
  int error_ = 0;
  bool stop_ = false;
  bool direct_ = true;
  uint64_t written_ = 0;
  std::thread io_;
};

}  // namespace cohort::ckpt
