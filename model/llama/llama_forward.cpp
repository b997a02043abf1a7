// LlamaModel's forward graph recorded on the tape (model/llama/llama.h): embedding, the layers (attention with
// sequence parallelism's all-to-alls where sharded, the MLP untiled or over row tiles), the final norm and the
// fused LM head + loss; and the logits of a retained final hidden state.
#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "engine/ops.h"
#include "model/llama/llama.h"
#include "model/llama/llama_internal.h"

namespace strata {

using namespace llama_detail;

VId LlamaModel::pid(Tape& t, const std::string& name) {
  Parameter* p = find(name);
  STRATA_CHECK(p != nullptr, "no parameter " + name);
  // A gradient on the host tier, or one another rank owns (ZeRO-2), has no device block until the step writes it
  // (Tape::GradHooks).
  const LazyGrad lazy = !p->trainable                        ? LazyGrad::none
                        : p->host_grad != Parameter::kDevice ? LazyGrad::host
                        : grad_transient(*p)                 ? LazyGrad::transient
                                                             : LazyGrad::none;
  return t.param(name, p->value(), p->trainable && lazy == LazyGrad::none ? p->grad_view() : Tensor(),
                 int(p - params_.data()), lazy);
}

VId LlamaModel::proj(Tape& t, VId x, int layer, const std::string& module, const std::string& cls) {
  bool lora = opt_.lora.enabled() && std::find(opt_.lora.target_modules.begin(), opt_.lora.target_modules.end(),
                                               module) != opt_.lora.target_modules.end();
  const std::string base = layer_name(layer, module_path(module));
  const std::string bias_name = base + ".bias";
  const VId bias = find(bias_name) ? pid(t, bias_name) : VId(-1);
  const VId w = pid(t, base + ".weight");
  // fp8: the base projection's GEMMs in FP8 where its shape allows (the adapters stay bf16).
  auto base_linear = [&](std::string c) {
    const Value& wv = t.value(w);
    const Shape& xs = t.value(x).shape;
    if (!opt_.fp8 || !ops::fp8_shape_ok(xs.numel() / xs[xs.nd - 1], wv.shape[1], wv.shape[0]))
      return ops::linear(t, x, w, bias, std::move(c));
    const ops::Fp8Codes& xq = fp8_codes(t, x, wv.requires_grad, t.value(x).cls + ".fp8");
    const ops::Fp8Codes& wq = fp8_codes(t, w, t.value(x).requires_grad, c + ".wfp8");
    return ops::linear_fp8(t, x, xq, w, wq, bias, std::move(c));
  };
  if (!lora) return base_linear(cls);
  VId y = base_linear(cls + ".base");
  VId a = ops::linear(t, x, pid(t, base + ".lora_A.weight"), cls + ".lora_a");
  VId b = ops::linear(t, a, pid(t, base + ".lora_B.weight"), cls + ".lora_b");
  return ops::add(t, y, b, opt_.lora.scale(), cls);
}

const ops::Fp8Codes& LlamaModel::fp8_codes(Tape& t, VId x, bool transpose, const std::string& cls) {
  auto it = fp8_codes_.find(x);
  if (it != fp8_codes_.end() && (!transpose || it->second.cols >= 0)) return it->second;
  // The projections reading one input have one trainability (the base weights'), and a weight is read by one
  // projection (its input's requires_grad), so the first asks for all.
  STRATA_CHECK(it == fp8_codes_.end(),
               "fp8: a tensor's codes were recorded without the transpose a later projection's gradient needs");
  return fp8_codes_[x] = ops::fp8_cast(t, x, transpose, cls);
}

ForwardIds LlamaModel::build(Tape& t, Tensor tokens, Tensor targets, Tensor pos, int B, int T, bool training,
                             double packed_pairs, const SeqShard& sp) {
  const int Hq = cfg_.num_attention_heads, Hkv = cfg_.num_key_value_heads, D = cfg_.head_dim;
  // Sequence parallelism: this rank's T/n tokens of each row; attention over all T on its heads
  // (model/llama/seq_parallel.h).
  const int n = sp.size();
  const int Hkv_sp = seq_parallel_kv_heads(cfg_, n);  // KV heads after replication (Hkv without sp)
  check_seq_parallel_len(T, n);
  STRATA_CHECK(tokens.numel() == int64_t(B) * (T / n), "build: the tokens are not B x T/n");
  const float eps = cfg_.rms_norm_eps;
  if (cfg_.sliding_window > 0 && T > cfg_.sliding_window)
    STRATA_THROW(UnsupportedError,
                 fmt::format("config.json: sliding_window is {} and the sequence is {} tokens: strata runs full "
                             "causal attention, which differs from {}'s windowed attention beyond the window; "
                             "train at sequence_len <= {}",
                             cfg_.sliding_window, T, io::arch_model_type(cfg_.arch), cfg_.sliding_window));
  if (pager_ && !pager_->installed_on(t))
    STRATA_THROW(UnsupportedError,
                 "this model pages its layers (layer_offloading): record it on a tape the "
                 "weight pager is installed on (the Trainer's)");
  fp8_codes_.clear();  // value ids of an earlier tape
  VId tok = t.input("tokens", tokens), tgt = t.input("targets", targets), ps = t.input("positions", pos);
  // Packed rows' attention segments: the positions of the tokens attention sees (all T of each row under sp).
  const VId seg_ps = packed_pairs <= 0 ? VId(-1) : n > 1 ? t.input("positions.rows", sp.packed_pos) : ps;
  VId inv = t.input("rope.inv_freq", inv_freq_.view());
  VId x = ops::embedding(t, tok, pid(t, "model.embed_tokens.weight"), "L0.input");
  t.mark_layer_input(x, 0);
  const int L = cfg_.num_hidden_layers;
  for (int i = 0; i < L; ++i) {
    std::string P = fmt::format("L{}", i);
    auto w = [&](const std::string& rest) { return layer_name(i, rest); };
    auto [n1, r1] = ops::rmsnorm(t, x, pid(t, w("input_layernorm.weight")), eps, P + ".attn_norm");
    // Under sp, q, k and v (the classes attention saves) are the head-sharded ones; "_seq": this rank's tokens.
    const std::string seq = n > 1 ? "_seq" : "";
    VId q = proj(t, n1, i, "q_proj", P + ".attn.q_proj");
    VId k = proj(t, n1, i, "k_proj", P + ".attn.k_proj");
    VId v = proj(t, n1, i, "v_proj", P + ".attn.v" + seq);
    if (cfg_.qk_norm) {  // Qwen3: each head of q and k normalised on its own, before rope
      q = ops::rmsnorm_heads(t, q, pid(t, w("self_attn.q_norm.weight")), Hq, eps, P + ".attn.q_norm").first;
      k = ops::rmsnorm_heads(t, k, pid(t, w("self_attn.k_norm.weight")), Hkv, eps, P + ".attn.k_norm").first;
    }
    // global positions: ps holds this rank's tokens' own
    q = ops::rope(t, q, ps, inv, Hq, P + ".attn.q" + seq, rope_attention_);
    k = ops::rope(t, k, ps, inv, Hkv, P + ".attn.k" + seq, rope_attention_);
    if (n > 1) {
      if (Hkv_sp != Hkv) {  // GQA with fewer KV heads than ranks: each repeated, as Ulysses does
        k = ops::repeat_heads(t, k, Hkv, Hkv_sp / Hkv, P + ".attn.k_rep");
        v = ops::repeat_heads(t, v, Hkv, Hkv_sp / Hkv, P + ".attn.v_rep");
      }
      q = ops::seq_to_heads(t, q, B, Hq, *sp.comm, P + ".attn.q");
      k = ops::seq_to_heads(t, k, B, Hkv_sp, *sp.comm, P + ".attn.k");
      v = ops::seq_to_heads(t, v, B, Hkv_sp, *sp.comm, P + ".attn.v");
    }
    auto [o, lse] = ops::attention(t, q, k, v, B, T, Hq / n, Hkv_sp / n, D, P + ".attn", seg_ps, packed_pairs);
    if (n > 1) o = ops::heads_to_seq(t, o, B, Hq, *sp.comm, P + ".attn.out_seq");
    VId a = proj(t, o, i, "o_proj", P + ".attn.o_proj");
    VId h = ops::add(t, x, a, 1.0f, P + ".mid");
    auto [n2, r2] = ops::rmsnorm(t, h, pid(t, w("post_attention_layernorm.weight")), eps, P + ".mlp_norm");
    VId d;
    if (opt_.mlp_tiles > 1) {  // one fused op over row tiles: no [B*T, F] tensor exists whole
      auto bias = [&](const char* m) {
        const std::string name = w(std::string("mlp.") + m + ".bias");
        return find(name) ? pid(t, name) : VId(-1);
      };
      d = ops::mlp_tiled(t, n2, pid(t, w("mlp.gate_proj.weight")), pid(t, w("mlp.up_proj.weight")),
                         pid(t, w("mlp.down_proj.weight")), bias("gate_proj"), bias("up_proj"), bias("down_proj"),
                         opt_.mlp_tiles, P + ".mlp", P + ".mlp.down");
    } else {
      VId g = proj(t, n2, i, "gate_proj", P + ".mlp.gate");
      VId u = proj(t, n2, i, "up_proj", P + ".mlp.up");
      VId s = ops::swiglu(t, g, u, P + ".mlp.act");
      d = proj(t, s, i, "down_proj", P + ".mlp.down");
    }
    // The last layer's output is the loss path's input: named outside the L* classes.
    x = ops::add(t, h, d, 1.0f, i + 1 < L ? fmt::format("L{}.input", i + 1) : std::string("final_norm.input"));
    if (i + 1 < L)
      t.mark_layer_input(x, i + 1);
    else
      t.mark_head(x);
  }
  t.begin_head();  // the final norm and the loss: backward reads them first
  auto [nf, rf] = ops::rmsnorm(t, x, pid(t, "model.norm.weight"), eps, "final_norm");
  VId head = pid(t, cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  ForwardIds ids;
  ids.loss =
      ops::lm_head_ce(t, nf, head, tgt, opt_.loss_chunk_tokens, training && opt_.loss_grad_in_forward, cfg_.vocab_size);
  ids.final_hidden = nf;
  return ids;
}

void LlamaModel::logits(Tape& t, VId final_hidden, Tensor out) {
  Parameter* head = find(cfg_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  const Tensor w = head->value();  // [padded_vocab, C]: its first vocab_size rows give the logits
  be_.lm_head_logits(out, t.tensor(final_hidden), Tensor(w.data, w.dtype, head->file_shape()));
}

}  // namespace strata
