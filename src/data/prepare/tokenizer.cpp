// The tokenizers of `cohort data prepare`. See tokenizer.h.
#include "data/prepare/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <stdexcept>

#include "data/shards/manifest.h"
#include "data/shards/mapped_file.h"

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
  t.eos_ = t.sp_->eos_id();
  if (t.eos_ >= 0 && !t.sp_->SetEncodeExtraOptions("eos").ok()) t.eos_ = -1;
  t.hash_ = xxh3_64(model.data(), model.size());
  t.model_ = std::move(model);
  return t;
}

Tokenizer Tokenizer::sentencepiece_file(const std::string& path) {
  std::string model, problem;
  if (!read_small_file(path, kMaxModelBytes, model, problem)) throw std::runtime_error(path + ": " + problem);
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

void Tokenizer::encode(const std::string& text, std::vector<uint32_t>& out) const {
  if (!sp_) {
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(text.data()), reinterpret_cast<const uint8_t*>(text.data()) + text.size());
    return;
  }
  std::vector<int> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    ids.clear();
    const auto status = sp_->Encode(std::string_view(text).substr(pos, nl - pos), &ids);
    if (!status.ok()) throw std::runtime_error("SentencePiece: " + status.ToString());
    out.insert(out.end(), ids.begin(), ids.end());
    pos = nl + 1;
  }
}

}  // namespace cohort::data
