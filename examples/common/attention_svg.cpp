#include "examples/common/attention_svg.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>

#include <fmt/format.h>

#include <attograd/autograd/error.h>
#include <attograd/autograd/io/safetensors.h>
#include <attograd/autograd/engine.h>

namespace attograd::app {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// White (0) to dark blue (1).
std::string color(float w) {
  const float t = std::clamp(w, 0.0f, 1.0f);
  auto mix = [&](int lo, int hi) { return static_cast<int>(static_cast<float>(lo) + t * static_cast<float>(hi - lo)); };
  return fmt::format("rgb({},{},{})", mix(255, 8), mix(255, 48), mix(255, 107));
}

// Code points, for the width of a label.
size_t text_length(const std::string& s) {
  return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

const char* kind_title(const std::string& kind) {
  if (kind == "enc-self") return "encoder self-attention";
  if (kind == "dec-self") return "decoder self-attention";
  if (kind == "causal-self") return "causal self-attention";
  return "cross-attention";
}

// Module name -> attention weights [1, H, rows, cols] of every attention
// module below model, in one forward (eval mode, no grad).
std::map<std::string, Tensor> observed_weights(Module& model, const std::function<void()>& forward) {
  const bool was_training = model.is_training();
  model.eval();
  std::map<std::string, Tensor> kept;
  {
    NoGradGuard no_grad;
    AttentionObserverGuard observe(model, [&kept](const std::string& name) -> AttentionObserver {
      return [&kept, name](AttentionCall& call) { kept[name] = call.weights; };
    });
    forward();
  }
  model.train(was_training);
  return kept;
}

}  // namespace

AttentionPictures draw_attention(Seq2SeqTransformer& model, const std::vector<std::string>& src_tokens,
                                 const Tensor& src, const std::vector<int64_t>& output, const Vocab& tgt_vocab) {
  std::vector<int64_t> tgt_in{kBosId};
  tgt_in.insert(tgt_in.end(), output.begin(), output.end());
  const std::vector<std::string> tgt_tokens = tgt_vocab.decode(tgt_in);
  std::map<std::string, Tensor> kept = observed_weights(model, [&] {
    model.forward(src, Tensor::from_vector(tgt_in, {1, static_cast<int64_t>(tgt_in.size())}));
  });

  AttentionPictures pics;
  for (const std::string kind : {"enc-self", "dec-self", "cross"}) {
    int64_t layer = 0;
    for (const auto& attention : attention_modules(model)) {
      const std::string& name = attention.first;
      const bool enc = name.starts_with("encoder."), cross = name.ends_with("cross_attn");
      if ((kind == "enc-self") != enc || (kind == "cross") != cross) continue;
      const Tensor& w = kept[name];
      if (!w.defined() || w.dim() != 4)
        fail<ValueError>("draw_attention", "{} gave no [1, H, T, S] weights in the forward", name);
      const int64_t H = w.size(1), R = w.size(2), C = w.size(3);
      const std::vector<float> values = w.contiguous().to_vector<float>();
      for (int64_t h = 0; h < H; ++h) {
        AttentionMap map;
        map.kind = kind;
        map.layer = layer;
        map.head = h;
        map.rows = enc ? src_tokens : tgt_tokens;
        map.cols = kind == "dec-self" ? tgt_tokens : src_tokens;
        if (static_cast<int64_t>(map.rows.size()) != R || static_cast<int64_t>(map.cols.size()) != C)
          fail<ValueError>("draw_attention", "{}: weights are [{}, {}] but there are {} x {} tokens", name, R, C,
                           map.rows.size(), map.cols.size());
        map.weights.assign(values.begin() + h * R * C, values.begin() + (h + 1) * R * C);
        pics.maps.push_back(std::move(map));
      }
      ++layer;
    }
  }
  return pics;
}

AttentionPictures draw_lm_attention(GPT& model, const std::vector<std::string>& tokens, const Tensor& ids) {
  std::map<std::string, Tensor> kept = observed_weights(model, [&] { model.forward(ids); });  // [1, H, T, T]
  AttentionPictures pics;
  int64_t layer = 0;
  for (const auto& [name, attention] : attention_modules(model)) {
    const Tensor& w = kept[name];
    const int64_t T = static_cast<int64_t>(tokens.size());
    if (!w.defined() || w.dim() != 4 || w.size(2) != T || w.size(3) != T)
      fail<ValueError>("draw_lm_attention", "{} gave no [1, H, {}, {}] weights in the forward", name, T, T);
    const std::vector<float> values = w.contiguous().to_vector<float>();
    for (int64_t h = 0; h < w.size(1); ++h) {
      AttentionMap map;
      map.kind = "causal-self";
      map.layer = layer;
      map.head = h;
      map.rows = map.cols = tokens;
      map.weights.assign(values.begin() + h * T * T, values.begin() + (h + 1) * T * T);
      pics.maps.push_back(std::move(map));
    }
    ++layer;
  }
  return pics;
}

std::string attention_svg(const AttentionMap& m) {
  constexpr int cell = 24, char_w = 8, pad = 8, title_h = 24;
  size_t row_chars = 0, col_chars = 0;
  for (const auto& s : m.rows) row_chars = std::max(row_chars, text_length(s));
  for (const auto& s : m.cols) col_chars = std::max(col_chars, text_length(s));
  const int left = pad + static_cast<int>(row_chars) * char_w + 6;
  const int top = title_h + pad + static_cast<int>(col_chars) * char_w + 6;
  const int R = static_cast<int>(m.rows.size()), C = static_cast<int>(m.cols.size());
  const std::string title = fmt::format("{} · layer {} · head {}", kind_title(m.kind), m.layer, m.head);
  const int title_w = 2 * pad + static_cast<int>(text_length(title)) * char_w;
  const int width = std::max(left + C * cell + pad, title_w), height = top + R * cell + pad;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"monospace\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"18\" font-weight=\"bold\">{}</text>\n",
      width, height, width, height, pad, escape(title));
  for (int c = 0; c < C; ++c)  // key labels, vertical, above the columns
    s += fmt::format("<text transform=\"translate({},{}) rotate(-90)\" dominant-baseline=\"middle\">{}</text>\n",
                     left + c * cell + cell / 2, top - 6, escape(m.cols[c]));
  for (int r = 0; r < R; ++r) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" dominant-baseline=\"middle\">{}</text>\n", left - 6,
                     top + r * cell + cell / 2, escape(m.rows[r]));
    for (int c = 0; c < C; ++c) {
      const float w = m.weights[static_cast<size_t>(r * C + c)];
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} -> {}: {:.3f}</title></rect>\n",
                       left + c * cell, top + r * cell, cell, cell, color(w), escape(m.rows[r]), escape(m.cols[c]), w);
    }
  }
  s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n</svg>\n", left,
                   top, C * cell, R * cell);
  return s;
}

void write_attention_pictures(const AttentionPictures& pics, const std::string& dir, const std::string& source,
                              const std::string& translation) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail<IOError>("attention", "cannot create {}: {}", dir, ec.message());
  // write_file_atomic's error names the file and the system's reason (disk full, permissions).
  auto write = [&](const std::string& name, const std::string& text) { write_file_atomic(dir + "/" + name, text); };
  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>attention: {}</title>\n<style>body{{font-family:sans-serif;"
      "margin:16px}} .row{{display:flex;flex-wrap:wrap;gap:8px;align-items:flex-start}} img{{border:1px solid #ddd}}"
      "</style></head><body>\n<h1>{}</h1>\n<p>Rows are queries, columns keys; darker is more attention "
      "(each row sums to 1). Decoder rows are labelled with their input token: that position predicts the next "
      "token.</p>\n",
      escape(source), translation.empty() ? escape(source) : escape(source) + " &rarr; " + escape(translation));
  std::string kind, section_layer;
  for (const AttentionMap& m : pics.maps) {
    const std::string file = fmt::format("{}-L{}-H{}.svg", m.kind, m.layer, m.head);
    write(file, attention_svg(m));
    const std::string layer_key = fmt::format("{}/{}", m.kind, m.layer);
    if (m.kind != kind) html += fmt::format("{}<h2>{}</h2>\n", kind.empty() ? "" : "</div>\n", kind_title(m.kind));
    if (layer_key != section_layer) {
      if (m.kind == kind) html += "</div>\n";
      html += fmt::format("<h3>layer {}</h3>\n<div class=\"row\">\n", m.layer);
    }
    kind = m.kind;
    section_layer = layer_key;
    html += fmt::format("<img src=\"{}\" alt=\"{} layer {} head {}\">\n", file, kind_title(m.kind), m.layer, m.head);
  }
  if (!pics.maps.empty()) html += "</div>\n";
  html += "</body></html>\n";
  write("index.html", html);
}

}  // namespace attograd::app
