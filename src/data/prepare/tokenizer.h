// data/prepare/tokenizer.h — the tokenizers `cohort data prepare` offers: raw bytes (vocabulary
// 256), a SentencePiece model from a file, or one trained on the inputs (BPE). Torch-free.
//
// SentencePiece reads text as lines (its trainer and spm_encode both do): a chunk is encoded line
// by line, each line followed by the model's end-of-sentence id where it has one — exactly what
// `spm_encode --output_format=id --extra_options=eos` prints, so the tokens can be checked against it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/prepare/text_inputs.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace cohort::data {

/// A tokenizer; encode() is safe to call from several threads at once.
class Tokenizer {
 public:
  /// Raw bytes: token = byte, vocabulary 256, no end-of-line token (newlines are bytes).
  static Tokenizer bytes();
  /// A SentencePiece model file (.model). Throws std::runtime_error naming the file.
  static Tokenizer sentencepiece_file(const std::string& path);
  /// A BPE model of `vocab` pieces trained on `inputs` (lines, sampled deterministically).
  /// The same inputs give the same model, byte for byte. Throws std::runtime_error with
  /// SentencePiece's message.
  static Tokenizer train_bpe(const std::vector<InputFile>& inputs, uint64_t vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Appends the tokens of `text` (whole lines) to `out`.
  void encode(const std::string& text, std::vector<uint32_t>& out) const;
  /// SentencePiece is slow (a few MB/s a core); most of a corpus is words seen before, so lines
  /// are encoded word by word through a cache — exact for models whose pieces never cross a space
  /// (SentencePiece's default). This encodes `text`'s lines both ways and turns the cache off for
  /// good at the first line that differs (a model trained otherwise). Call before encode().
  void check_words(const std::string& text);
  /// Whether encode() goes word by word (check_words() found no difference).
  bool by_words() const { return by_words_; }

  const std::string& kind() const { return kind_; }          ///< "bytes" or "sentencepiece"
  uint64_t vocab_size() const { return vocab_; }
  int64_t eos_id() const { return eos_; }                    ///< -1: none
  const std::string& model() const { return model_; }        ///< the serialized model (empty for bytes)
  uint64_t hash() const { return hash_; }                    ///< XXH3-64 of the model (of "bytes" for bytes)

 private:
  Tokenizer() = default;
  static Tokenizer from_model(std::string model, const std::string& what);
  void encode_whole(std::string_view line, std::vector<uint32_t>& out) const;
  void encode_by_words(std::string_view line, std::vector<uint32_t>& out) const;
  std::string kind_ = "bytes";
  uint64_t vocab_ = 256;
  int64_t eos_ = -1;
  bool by_words_ = false;
  std::string model_;
  uint64_t hash_ = 0;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

}  // namespace cohort::data
