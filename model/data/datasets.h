// Text datasets for strata-train, as axolotl spells them (`datasets: [{path, type, field}]`):
// each row of a file is rendered (model/data/chat_template.h), tokenised, cached next to the source,
// and laid one example per row of `sequence_len` tokens with per-token targets: -1 on padding
// and, with train_on_inputs: false, on the prompt.
//
// An example is BOS (where the tokenizer's template adds one) + prompt + response + EOS. Its
// row holds its first seq tokens as inputs; input i's target is token i + 1 (-1 when that token
// is padding or, with train_on_inputs: false, a prompt token). An example of more than seq
// tokens is truncated to seq or dropped (excess_length_strategy); one with no target left is
// dropped too; both are counted.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "model/data/chat_dataset.h"
#include "text/tokenizer.h"

namespace strata {

// One entry of `datasets:` (model/data/datasets.h): a file, its format and, for `completion` jsonl, the
// text field.
struct DatasetSpec {
  std::string path;
  std::string type = "completion";  // completion, alpaca, chat or chat_template
  std::string field;                // completion jsonl: the text field ("" = "text")
  ChatTemplateOptions chat = {};    // chat_template: axolotl's keys (model/data/chat_dataset.h)
};

// What build_dataset_rows reads of a run's settings (model/run/train_config.h fills it).
struct DatasetOptions {
  std::vector<DatasetSpec> datasets;
  int seq = 128;
  bool train_on_inputs = false;  // false: prompt tokens are masked out of the loss
  bool drop_excess = false;      // drop (else truncate) examples over seq
  bool sample_packing = false;   // whole examples packed into each row, attention per example
};

// One tokenised example: ids, and per id whether it is a response token.
struct Example {
  std::vector<int32_t> ids;
  std::vector<uint8_t> trained;  // 1: a response token (its prediction counts in the loss)
  bool operator==(const Example&) const = default;
};

// Renders and tokenises every example of `d` from the file's bytes. FormatError naming the file,
// the line (jsonl) and the field for a row that is not a JSON object, lacks a field, or has a
// wrong type or role. `tok` gives BOS/EOS and the chat template.
// A chat_template dataset needs `chat` (load_chat_format).
// Lines are tokenised on `threads` threads (0: one per core, at most 16, and one per 256 lines), each a
// contiguous range writing its own examples; a plain-text file is cut at line starts into as many parts
// (one per 256 KiB) where the tokenizer allows it (text::Tokenizer::next_cut, else one thread). The
// result, and so the cache, is the same for any count.
std::vector<Example> tokenize_dataset(const DatasetSpec& d, const std::string& contents, const text::Tokenizer& tok,
                                      const ChatFormat* chat = nullptr, int threads = 0);
// A plain-text file's ids (no BOS/EOS): the text cut at line starts into a part per thread where the
// tokenizer allows it (text::Tokenizer::next_cut: exactly the ids of encode(text, false)), else on one
// thread. threads 0: one per core (at most 16) and one per 256 KiB.
std::vector<int32_t> encode_text(const text::Tokenizer& tok, std::string_view text, int threads = 0);
// The dataset cache's bytes for `examples` (what load_dataset writes).
std::string dataset_cache_bytes(const std::vector<Example>& examples);

// The dataset cache's file for `d`: <path>.strata-cache/<hash>.bin, the hash over the source
// bytes, the tokenizer files' bytes, the type, the field and kTemplateVersion; for chat_template,
// the template's text and the chat keys too.
std::string dataset_cache_path(const DatasetSpec& d, const std::string& contents, const std::string& tokenizer_dir);

// tokenize_dataset through the cache: a hit reads the examples, a miss tokenises and writes them
// (atomically; a cache that cannot be written is a warning on `warn`, not an error).
struct DatasetLoad {
  std::vector<Example> examples;
  bool cache_hit = false;
  std::string cache_file;
};
DatasetLoad load_dataset(const DatasetSpec& d, const text::Tokenizer& tok, const std::string& tokenizer_dir,
                         std::FILE* warn = stderr);

struct RowStats {
  long examples = 0;   // in the file
  long rows = 0;       // laid into rows
  long truncated = 0;  // longer than seq, cut to seq
  long dropped = 0;    // longer than seq, left out (excess_length_strategy: drop)
  long untrained = 0;  // no target left to train on (all prompt), left out
  long trained_targets = 0;
  long laid = 0;  // examples (or chunks) laid into the rows: `rows` unpacked, more with sample packing
};

// Appends one row of seq inputs and seq targets per example to `inputs` / `targets`. With `chunk`
// (a plain-text file: one long example) an example longer than seq is cut into consecutive rows
// instead of truncated or dropped: row k reads tokens [k*seq, k*seq + seq) and predicts the next
// token of each, so every token after the first is predicted exactly once; the last row is padded.
RowStats lay_rows(const std::vector<Example>& examples, int seq, int32_t pad_id, bool train_on_inputs, bool drop_excess,
                  std::vector<int32_t>& inputs, std::vector<int32_t>& targets, bool chunk);
// The plain-text files (.txt) a completion dataset reads whole: laid out in chunks (lay_rows).
bool chunks_rows(const DatasetSpec& d);
RowStats lay_rows(const std::vector<Example>& examples, int seq, int32_t pad_id, bool train_on_inputs, bool drop_excess,
                  std::vector<int32_t>& inputs, std::vector<int32_t>& targets);

// Sample packing: the examples laid whole into rows, in order (sequential greedy: one that does not
// fit the rest of the current row starts the next, which leaves the rest padded with ignored
// targets); over seq tokens truncated or dropped, no target left dropped, as lay_rows. Each example's
// inputs and targets are what lay_rows gives it in a row of its own (its last token predicts
// nothing), and `positions` gets 0..n-1 for it; the padding after the last example of a row is one
// more run 0..k-1 (Batch::positions).
RowStats lay_rows_packed(const std::vector<Example>& examples, int seq, int32_t pad_id, bool train_on_inputs,
                         bool drop_excess, std::vector<int32_t>& inputs, std::vector<int32_t>& targets,
                         std::vector<int32_t>& positions);

// Every dataset of the config, in order, as rows (rows * seq inputs and targets). With
// cfg.sample_packing, each dataset's examples packed (lay_rows_packed; a plain-text file's chunks
// fill their rows already) and `positions` per token (rows * seq).
struct DatasetRows {
  std::vector<int32_t> inputs, targets, positions;
  long rows = 0;
  long examples = 0;    // laid into the rows
  int32_t max_id = -1;  // the largest input id (checked against the model's vocabulary)
};
// The tokenizer's pad token (pad_token in tokenizer_config.json, or <pad>, <|pad|>), else EOS.
int32_t pad_id_for(const text::Tokenizer& tok, const std::string& tokenizer_dir);
// Loads the tokenizer from `tokenizer_dir`, every dataset (through its cache) and lays the rows;
// prints one line a dataset on `info`. ConfigError naming the file when a dataset gives no row.
DatasetRows build_dataset_rows(const DatasetOptions& cfg, const std::string& tokenizer_dir, std::FILE* info);

// strata-train --preview-data N: the first n examples of `d` as text with the trained tokens
// between [[ and ]] and the token counts, as axolotl's preprocess debug shows them.
void preview_dataset(std::FILE* out, const DatasetSpec& d, const text::Tokenizer& tok, const std::string& tokenizer_dir,
                     int n);

}  // namespace strata
