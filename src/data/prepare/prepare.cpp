// `cohort data prepare` for text and raw records. See prepare.h.
#include "data/prepare/prepare.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "data/prepare/text_inputs.h"
#include "data/prepare/tokenizer.h"
#include "data/prepare/shard_writer.h"

namespace cohort::data {
namespace {

namespace fs = std::filesystem;

void make_out_dir(const std::string& out) {
  if (out.empty()) throw std::runtime_error("no output directory (--out DIR)");
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec || !fs::is_directory(out)) throw std::runtime_error(out + ": cannot create the directory (" + ec.message() + ")");
  if (fs::exists(out + "/manifest.json")) {
    throw std::runtime_error(out + " already holds a prepared data set (manifest.json); choose another --out or remove it");
  }
}

int thread_count(int asked) {
  if (asked > 0) return asked;
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

// One tokenizing task: a chunk of whole lines, and whether it ends its file (a document).
struct Task {
  std::string text;
  bool ends_document = false;
  std::vector<uint32_t> tokens;
};

Manifest prepare_text(const PrepareOptions& o, std::ostream& log) {
  std::vector<std::string> skipped;
  const std::vector<InputFile> files = list_text_inputs(o.inputs, skipped);
  uint64_t total = 0;
  for (const auto& f : files) total += f.bytes;
  if (!skipped.empty()) {
    log << "prepare: skipped " << skipped.size() << " binary file(s), e.g. " << skipped.front() << "\n";
  }
  if (total == 0) {
    throw std::runtime_error("no text to prepare: " + std::to_string(files.size()) + " text file(s), all empty" +
                             (skipped.empty() ? "" : ", and " + std::to_string(skipped.size()) + " binary file(s) skipped"));
  }
  const int threads = thread_count(o.threads);
  Tokenizer tok = o.vocab > 0            ? Tokenizer::train_bpe(files, o.vocab)
                  : o.tokenizer == "bytes" ? Tokenizer::bytes()
                                         : Tokenizer::sentencepiece_file(o.tokenizer);
  {  // the word cache's check, on the first chunk of text
    ChunkReader first(files.front().path, 64u << 10);
    std::string sample;
    first.next(sample);
    tok.check_words(sample);
  }
  make_out_dir(o.out);
  Manifest base;
  base.kind = "tokens";
  base.item_bytes = tok.vocab_size() <= 65536 ? 2 : 4;
  base.vocab_size = tok.vocab_size();
  base.tokenizer.kind = tok.kind();
  base.tokenizer.xxh3 = tok.hash();
  base.tokenizer.eos_id = tok.eos_id();
  if (!tok.model().empty()) base.tokenizer.file = "tokenizer.model";
  ShardWriter writer(o.out, base, o.shard_bytes);
  if (!tok.model().empty()) {  // the data set carries its tokenizer (and its hash names it)
    std::ofstream model(o.out + "/tokenizer.model", std::ios::binary);
    model.write(tok.model().data(), static_cast<std::streamsize>(tok.model().size()));
    if (!model.flush()) throw std::runtime_error(o.out + "/tokenizer.model: write failed");
  }
  log << "prepare: " << files.size() << " file(s), " << total << " bytes, tokenizer " << tok.kind() << " (vocabulary "
      << tok.vocab_size() << (tok.by_words() ? ", by words" : "") << "), " << threads << " thread(s)\n";

  // Rounds of up to 2 tasks per thread: read in order, tokenize in parallel, write in order. The
  // tasks' boundaries depend on the inputs and chunk_bytes only, so the shards do not depend on
  // the thread count.
  std::vector<Task> round;
  size_t file = 0;
  std::unique_ptr<ChunkReader> reader;
  bool more = true;
  while (more) {
    round.clear();
    while (round.size() < static_cast<size_t>(2 * threads)) {
      if (!reader) {
        if (file == files.size()) {
          more = false;
          break;
        }
        reader = std::make_unique<ChunkReader>(files[file++].path, o.chunk_bytes);
      }
      Task t;
      if (!reader->next(t.text)) {
        reader.reset();
        if (!round.empty()) {
          round.back().ends_document = true;
        } else {
          writer.end_document();  // the file's last chunk went out with the previous round
        }
        continue;
      }
      round.push_back(std::move(t));
    }
    std::vector<std::thread> pool;
    std::vector<std::string> errors(threads);
    for (int w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        try {
          for (size_t i = w; i < round.size(); i += threads) tok.encode(round[i].text, round[i].tokens);
        } catch (const std::exception& e) {
          errors[w] = e.what();
        }
      });
    }
    for (auto& th : pool) th.join();
    for (const auto& e : errors) {
      if (!e.empty()) throw std::runtime_error(e);
    }
    for (const auto& t : round) {
      writer.add_tokens(t.tokens.data(), t.tokens.size());
      if (t.ends_document) writer.end_document();
    }
  }
  writer.end_document();
  Manifest m = writer.finish();
  log << "prepare: " << m.items() << " tokens, " << m.documents() << " documents, " << m.shards.size() << " shard(s) in "
      << o.out << "\n";
  return m;
}

Manifest prepare_raw_records(const PrepareOptions& o, std::ostream& log) {
  make_out_dir(o.out);
  Manifest base;
  base.kind = "records";
  base.item_bytes = o.record_bytes;
  ShardWriter writer(o.out, base, o.shard_bytes);
  std::vector<uint8_t> buffer;
  for (const auto& path : o.inputs) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw std::runtime_error(path + ": not a regular file (records come from files)");
    const uint64_t bytes = fs::file_size(path, ec);
    if (bytes % o.record_bytes != 0) {
      throw std::runtime_error(path + ": " + std::to_string(bytes) + " bytes, not a multiple of the record size " +
                               std::to_string(o.record_bytes));
    }
    std::ifstream in(path, std::ios::binary);
    const uint64_t per_read = std::max<uint64_t>(1, (8ull << 20) / o.record_bytes);
    for (uint64_t left = bytes / o.record_bytes; left > 0;) {
      const uint64_t n = std::min(left, per_read);
      buffer.resize(n * o.record_bytes);
      if (!in.read(reinterpret_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.size()))) {
        throw std::runtime_error(path + ": read failed (changed while read?)");
      }
      writer.add_records(buffer.data(), n);
      left -= n;
    }
  }
  Manifest m = writer.finish();
  log << "prepare: " << m.items() << " records of " << o.record_bytes << " bytes, " << m.shards.size() << " shard(s) in "
      << o.out << "\n";
  return m;
}

}  // namespace

Manifest prepare(const PrepareOptions& o, std::ostream& log) {
  if (o.inputs.empty()) throw std::runtime_error("no inputs: name text files or directories");
  if (o.shard_bytes == 0) throw std::runtime_error("--shard-bytes must be positive");
  if (o.idx) return prepare_idx_records(o, log);
  if (o.record_bytes > 0) return prepare_raw_records(o, log);
  return prepare_text(o, log);
}

}  // namespace cohort::data
