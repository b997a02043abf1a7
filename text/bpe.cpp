#include "text/bpe.h"

#include <fmt/format.h>

#include <atomic>
#include <queue>

#include "text/unicode.h"

namespace strata::text {
namespace {

std::atomic<uint64_t> next_serial{1};

// Words seen recently, per thread, for the model that used it last (tokenizers keeps 10k words
// under 256 bytes; most of a corpus is a few thousand distinct words).
struct WordCache {
  static constexpr size_t kMaxEntries = 16384;
  static constexpr size_t kMaxWordBytes = 256;
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
};

struct Symbol {
  int32_t id;
  uint32_t len;        // bytes of the word it covers
  int32_t prev, next;  // indices into the symbol array, -1 at the ends
  bool removed;
};

struct QueuedMerge {
  int32_t rank, pos, merged;
  // std::priority_queue pops the largest: make "larger" mean lower rank, then lower position.
  bool operator<(const QueuedMerge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

Bpe::Bpe(Vocab vocab, const std::vector<BpeMerge>& merges, BpeOptions options)
    : vocab_(std::move(vocab)), opt_(options), serial_(next_serial++) {
  size_t capacity = 2;
  int bits = 1;
  while (capacity < 2 * merges.size()) {
    capacity *= 2;
    ++bits;
  }
  merges_.assign(capacity, Slot{});
  shift_ = 64 - bits;
  for (size_t r = 0; r < merges.size(); ++r) {
    const uint64_t key = pair_key(merges[r].left, merges[r].right);
    size_t i = slot_of(key);
    while (merges_[i].key != kEmpty && merges_[i].key != key) i = (i + 1) & (capacity - 1);
    merges_[i] = {key, {int32_t(r), merges[r].merged}};  // a repeated pair keeps its last rank
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab_.find(std::string_view(fmt::format("<0x{:02X}>", b)));
    byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
}

void Bpe::encode_word(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* ends) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      if (ends) ends->push_back(uint32_t(word.size()));
      return;
    }
  }
  if (ends || word.size() >= WordCache::kMaxWordBytes) {
    merge_word(word, out, ends);
    return;
  }
  thread_local WordCache cache;
  if (cache.owner != serial_) {
    cache.words.clear();
    cache.owner = serial_;
  }
  auto it = cache.words.find(word);
  if (it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  size_t first = out.size();
  merge_word(word, out, nullptr);
  if (cache.words.size() >= WordCache::kMaxEntries) cache.words.clear();
  cache.words.emplace(std::string(word), std::vector<int32_t>(out.begin() + long(first), out.end()));
}

void Bpe::merge_word(std::string_view word, std::vector<int32_t>& out, std::vector<uint32_t>* ends) const {
  thread_local std::vector<Symbol> sym;
  sym.clear();
  auto add = [&](int32_t id, uint32_t len) {
    int32_t i = int32_t(sym.size());
    sym.push_back({id, len, i - 1, -1, false});
    if (i > 0) sym[size_t(i) - 1].next = i;
  };
  // A pending <unk>: tokenizers emits it only when the next known character (or the end) comes,
  // fusing consecutive unknown characters into one when fuse_unk is set.
  bool unk_pending = false;
  uint32_t unk_len = 0;
  for (size_t i = 0; i < word.size();) {
    size_t len = size_t(utf8_length(uint8_t(word[i])));
    if (i + len > word.size()) len = word.size() - i;
    std::string_view ch = word.substr(i, len);
    i += len;
    auto it = vocab_.find(ch);
    if (it != vocab_.end()) {
      if (unk_pending) add(opt_.unk_id, unk_len);
      unk_pending = false;
      add(it->second, uint32_t(len));
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (char b : ch) all = all && byte_ids_[uint8_t(b)] >= 0;
      if (all) {
        for (char b : ch) add(byte_ids_[uint8_t(b)], 1);
        continue;
      }
    }
    if (opt_.unk_id >= 0) {
      if (unk_pending && !opt_.fuse_unk) {
        add(opt_.unk_id, unk_len);
        unk_len = 0;
      }
      if (!unk_pending) unk_len = 0;
      unk_pending = true;
      unk_len += uint32_t(len);
    }
  }
  if (unk_pending) add(opt_.unk_id, unk_len);

  std::priority_queue<QueuedMerge> queue;
  for (size_t p = 0; p + 1 < sym.size(); ++p)
    if (const Rank* m = find_merge(sym[p].id, sym[p + 1].id)) queue.push({m->rank, int32_t(p), m->merged});
  while (!queue.empty()) {
    QueuedMerge top = queue.top();
    queue.pop();
    Symbol& cur = sym[size_t(top.pos)];
    if (cur.removed || cur.next < 0) continue;
    Symbol& right = sym[size_t(cur.next)];
    // An entry made stale by an earlier merge: the pair there no longer makes this token.
    const Rank* now = find_merge(cur.id, right.id);
    if (!now || now->merged != top.merged) continue;
    cur.id = top.merged;
    cur.len += right.len;
    right.removed = true;
    cur.next = right.next;
    if (cur.next >= 0) sym[size_t(cur.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (const Rank* m = find_merge(sym[size_t(cur.prev)].id, cur.id)) queue.push({m->rank, cur.prev, m->merged});
    if (cur.next >= 0)
      if (const Rank* m = find_merge(cur.id, sym[size_t(cur.next)].id)) queue.push({m->rank, top.pos, m->merged});
  }
  uint32_t end = 0;
  for (int32_t p = sym.empty() ? -1 : 0; p >= 0; p = sym[size_t(p)].next) {
    out.push_back(sym[size_t(p)].id);
    end += sym[size_t(p)].len;
    if (ends) ends->push_back(end);
  }
}

}  // namespace strata::text
