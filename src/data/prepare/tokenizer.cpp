// The tokenizers of `cohort data prepare`. See tokenizer.h.
#include "data/prepare/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "data/shards/manifest.h"
#include "cohort/data_file.h"

namespace cohort::data {
namespace {

constexpr uint64_t kMaxModelBytes = 1ull << 30;

// The inputs' lines, file after file, for the trainer (which samples input_sentence_size of them
// with its seeded generator: the same model for the same inputs).
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<InputFile>& inputs) : inputs_(inputs) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return status_; }

 private:
  void advance() {
    for (;;) {
      if (pos_ < chunk_.size()) {
        size_t nl = chunk_.find('\n', pos_);
        if (nl == std::string::npos) nl = chunk_.size();
        line_.assign(chunk_, pos_, nl - pos_);
        pos_ = nl + 1;
        return;
      }
      chunk_.clear();
      pos_ = 0;
      if (reader_ && reader_->next(chunk_)) continue;
      if (file_ == inputs_.size()) {
        done_ = true;
        return;
      }
      reader_ = std::make_unique<ChunkReader>(inputs_[file_++].path, 4u << 20);
    }
  }
  const std::vector<InputFile>& inputs_;
  size_t file_ = 0;
  std::unique_ptr<ChunkReader> reader_;
  std::string chunk_, line_;
  size_t pos_ = 0;
  bool done_ = false;
  sentencepiece::util::Status status_;
};

}  // namespace

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::bytes() {
  Tokenizer t;
  t.hash_ = xxh3_64("bytes", 5);
  return t;
}

Tokenizer Tokenizer::from_model(std::string model, const std::string& what) {
  Tokenizer t;
  t.kind_ = "sentencepiece";
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t.sp_->LoadFromSerializedProto(model);
  if (!status.ok()) throw std::runtime_error(what + ": not a SentencePiece model (" + status.ToString() + ")");
  t.vocab_ = static_cast<uint64_t>(t.sp_->GetPieceSize());
  t.eos_ = t.sp_->eos_id();  // appended here after each line, as spm_encode's --extra_options=eos does
  t.by_words_ = true;         // until check_words() finds a line it would encode differently
  t.hash_ = xxh3_64(model.data(), model.size());
  t.model_ = std::move(model);
  return t;
}

Tokenizer Tokenizer::sentencepiece_file(const std::string& path) {
  std::string model, problem;
  if (!read_data_file(path, {kMaxModelBytes, "a tokenizer model may have"}, model, problem)) throw std::runtime_error(path + ": " + problem);
  return from_model(std::move(model), path);
}

Tokenizer Tokenizer::train_bpe(const std::vector<InputFile>& inputs, uint64_t vocab) {
  sentencepiece::SetRandomGeneratorSeed(0x636f686f);  // the sampled lines, and so the model, are reproducible
  LineIterator lines(inputs);
  std::string model;
  const std::string args = "--model_type=bpe --vocab_size=" + std::to_string(vocab) +
                           " --input_sentence_size=2000000 --shuffle_input_sentence=true --minloglevel=2"
                           " --num_threads=1";  // the model records it: any other count would change its hash
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok()) throw std::runtime_error("training a BPE tokenizer of " + std::to_string(vocab) + " pieces failed: " + status.ToString());
  return from_model(std::move(model), "the trained tokenizer");
}

void Tokenizer::encode_whole(std::string_view line, std::vector<uint32_t>& out) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(line, &ids);
  if (!status.ok()) throw std::runtime_error("SentencePiece: " + status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

// A line word by word, each word's pieces from a cache of this thread. Exact where pieces never
// cross a space (SentencePiece's split_by_whitespace, its default) and spaces only separate words
// (a dummy prefix, extra whitespace removed): then encoding "a b" is encoding "a", then "b".
void Tokenizer::encode_by_words(std::string_view line, std::vector<uint32_t>& out) const {
  thread_local std::unordered_map<std::string, std::vector<uint32_t>> cache;
  thread_local uint64_t cache_of = 0;
  if (cache_of != hash_ || cache.size() > (1u << 20)) {
    cache.clear();
    cache_of = hash_;
  }
  size_t pos = 0;
  while (pos < line.size()) {
    size_t end = line.find(' ', pos);
    if (end == std::string_view::npos) end = line.size();
    if (end > pos) {
      const std::string word(line.substr(pos, end - pos));
      auto it = cache.find(word);
      if (it == cache.end()) {
        std::vector<uint32_t> ids;
        encode_whole(word, ids);
        it = cache.emplace(word, std::move(ids)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    pos = end + 1;
  }
}

void Tokenizer::encode(const std::string& text, std::vector<uint32_t>& out) const {
  if (!sp_) {
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(text.data()), reinterpret_cast<const uint8_t*>(text.data()) + text.size());
    return;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line = std::string_view(text).substr(pos, nl - pos);
    if (by_words_) {
      encode_by_words(line, out);
    } else {
      encode_whole(line, out);
    }
    if (eos_ >= 0) out.push_back(static_cast<uint32_t>(eos_));
    pos = nl + 1;
  }
}

void Tokenizer::check_words(const std::string& text) {
  if (!sp_ || !by_words_) return;
  size_t pos = 0;
  std::vector<uint32_t> whole, words;
  while (pos < text.size() && by_words_) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line = std::string_view(text).substr(pos, nl - pos);
    whole.clear();
    words.clear();
    encode_whole(line, whole);
    encode_by_words(line, words);
    by_words_ = whole == words;
    pos = nl + 1;
  }
}

}  // namespace cohort::data
