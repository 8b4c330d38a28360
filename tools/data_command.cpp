// `cohort data`: prepare a data set (text → token shards, IDX/raw → record shards), verify its
// checksums and indexes, inspect its manifest. One line on stderr for any bad input.
#include "data_command.h"

#include <CLI/CLI.hpp>

#include <cctype>
#include <iostream>

#include "data/prepare/prepare.h"
#include "data/shards/shard_set.h"

namespace cohort::tools {
namespace {

// "256MiB", "1GB", "4096": bytes; 0 for anything else.
uint64_t parse_bytes(const std::string& text) {
  size_t i = 0;
  uint64_t v = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    if (v > (uint64_t{1} << 50)) return 0;
    v = v * 10 + static_cast<uint64_t>(text[i++] - '0');
  }
  if (i == 0) return 0;
  const std::string unit = text.substr(i);
  const struct { const char* name; uint64_t mult; } units[] = {
      {"", 1}, {"B", 1}, {"K", 1000}, {"KB", 1000}, {"KiB", 1024}, {"M", 1000000}, {"MB", 1000000},
      {"MiB", 1 << 20}, {"G", 1000000000}, {"GB", 1000000000}, {"GiB", 1 << 30}};
  for (const auto& u : units) {
    if (unit == u.name) return v * u.mult;
  }
  return 0;
}

}  // namespace

CLI::App* add_data_command(CLI::App& app, DataOptions& o) {
  CLI::App* data = app.add_subcommand("data", "Prepare, verify and inspect sharded data sets (docs/data.md)");
  data->require_subcommand(1);
  CLI::App* prepare = data->add_subcommand("prepare", "Text files or directories → token shards; IDX or raw files → record shards");
  prepare->add_option("inputs", o.inputs, "text files or directories (walked; binary files skipped); IDX or raw record files")->required();
  prepare->add_option("--out,-o", o.out, "the data set's directory (created)")->required();
  prepare->add_option("--tokenizer", o.tokenizer, "bytes (vocabulary 256), or a SentencePiece .model file")->capture_default_str();
  prepare->add_option("--vocab", o.vocab, "train a BPE tokenizer of this many pieces on the inputs (SentencePiece)");
  prepare->add_option("--threads", o.threads, "tokenizing threads (0: all cores); the output is the same for any count")->capture_default_str();
  prepare->add_option("--shard-bytes", o.shard_bytes, "shard size (256MiB, 1GB, 4096)")->capture_default_str();
  prepare->add_option("--chunk-bytes", o.chunk_bytes, "text per tokenizing task (whole lines; the output does not depend on it)")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 30));
  prepare->add_option("--records", o.records, "the inputs are raw records of this many bytes");
  prepare->add_flag("--idx", o.idx, "the inputs are IDX files (gzipped or not) read side by side: record i = item i of each");
  CLI::App* verify = data->add_subcommand("verify", "Check every shard's size, index and XXH3 against the manifest");
  verify->add_option("dir", o.dir, "a prepared data set")->required();
  CLI::App* inspect = data->add_subcommand("inspect", "Print a data set's manifest summary");
  inspect->add_option("dir", o.dir, "a prepared data set")->required();
  return data;
}

int run_data_command(const CLI::App& data, const DataOptions& o) {
  try {
    if (data.got_subcommand("prepare")) {
      data::PrepareOptions p;
      p.inputs = o.inputs;
      p.out = o.out;
      p.tokenizer = o.tokenizer;
      p.vocab = o.vocab;
      p.threads = o.threads;
      p.shard_bytes = parse_bytes(o.shard_bytes);
      if (p.shard_bytes == 0) throw std::runtime_error("--shard-bytes " + o.shard_bytes + ": not a positive size (256MiB, 1GB, 4096)");
      p.chunk_bytes = o.chunk_bytes;
      p.record_bytes = o.records;
      p.idx = o.idx;
      if (o.vocab > 0 && o.tokenizer != "bytes") throw std::runtime_error("--vocab trains a tokenizer; --tokenizer names one: give one of them");
      if ((o.idx || o.records > 0) && (o.vocab > 0 || o.tokenizer != "bytes")) {
        throw std::runtime_error("records (--idx, --records) take no tokenizer");
      }
      data::prepare(p, std::cerr);
      return 0;
    }
    const data::ShardSet set(o.dir, 2, false);
    const auto& m = set.manifest();
    if (data.got_subcommand("verify")) set.verify();
    std::cout << o.dir << ": " << m.kind << ", " << m.items() << (m.tokens() ? " tokens (" : " records of ")
              << (m.tokens() ? std::string(data::token_dtype(m.item_bytes)) + ", vocabulary " + std::to_string(m.vocab_size) +
                                   ", tokenizer " + m.tokenizer.kind + " " + data::hex64(m.tokenizer.xxh3) + ", " +
                                   std::to_string(m.documents()) + " documents)"
                             : std::to_string(m.item_bytes) + " bytes")
              << ", " << m.shards.size() << " shard(s), fingerprint " << data::hex64(m.data_fingerprint())
              << (data.got_subcommand("verify") ? ": every checksum matches" : "") << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.rfind("cohort: ", 0) == 0) what = what.substr(8);
    std::cerr << "cohort data: error: " << what << std::endl;
    return 1;
  }
}

}  // namespace cohort::tools
