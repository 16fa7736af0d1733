#include <attograd/autograd/graph_dot.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <tuple>
#include <unordered_map>

#include <attograd/autograd/error.h>

namespace attograd {

namespace {

enum class Kind { op, leaf, constant };

struct Vertex {
  Kind kind = Kind::op;
  const Node* node = nullptr;  // null for a constant
  Shape shape;
  DType dtype = DType::f32;
  std::string name;             // a leaf's name ("" when `names` lacks it)
  std::vector<size_t> inputs;   // the vertices it reads, in input order
  std::optional<size_t> block;  // index into Graph::blocks; none outside every block
};

struct BlockKey {
  std::string prefix;
  int64_t index = 0;
  auto operator<=>(const BlockKey&) const = default;
};

struct Graph {
  std::vector<Vertex> v;
  std::vector<BlockKey> blocks;
};

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// "encoder.layers.3.linear1.weight" -> {"encoder.layers", 3}: the part before
// the first all-digit component, and that number.
std::optional<BlockKey> block_of(const std::string& name) {
  size_t start = 0;
  while (start < name.size()) {
    size_t dot = name.find('.', start);
    if (dot == std::string::npos) dot = name.size();
    const std::string part = name.substr(start, dot - start);
    if (all_digits(part) && start > 0) return BlockKey{name.substr(0, start - 1), std::stoll(part)};
    start = dot + 1;
  }
  return std::nullopt;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string bytes_str(size_t b) {
  if (b < 1024) return fmt::format("{} B", b);
  if (b < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1024 * 1024));
}

Graph collect(const Tensor& root, const DotOptions& opt) {
  Graph g;
  if (!root.grad_fn()) {  // a leaf on its own
    auto it = opt.names.find(root.id());
    g.v.push_back({Kind::leaf, nullptr, root.shape(), root.dtype(), it == opt.names.end() ? "" : it->second, {}, std::nullopt});
    return g;
  }
  std::vector<const Node*> nodes;
  std::set<const Node*> seen{root.grad_fn().get()};
  std::vector<const Node*> stack{root.grad_fn().get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    nodes.push_back(n);
    for (const auto& c : n->next)
      if (c && seen.insert(c.get()).second) stack.push_back(c.get());
  }
  std::sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) { return a->sequence < b->sequence; });

  std::unordered_map<const Node*, size_t> index;
  for (const Node* n : nodes) {
    const bool leaf = n->kind == NodeKind::accumulate_grad;
    Vertex x{leaf ? Kind::leaf : Kind::op, n, n->output_shape, n->output_dtype, leaf_name(*n, opt.names), {}, std::nullopt};
    for (size_t i = 0; i < n->next.size(); ++i) {
      if (n->next[i] || !opt.constants) continue;
      x.inputs.push_back(g.v.size());
      g.v.push_back({Kind::constant, nullptr, n->input_shapes[i], n->input_dtypes[i], "", {}, std::nullopt});
    }
    index[n] = g.v.size();
    g.v.push_back(std::move(x));
  }
  // Inputs in the op's order: constants were placed above, producers now.
  for (Vertex& x : g.v) {
    if (x.kind != Kind::op) continue;
    std::vector<size_t> inputs;
    size_t next_constant = 0;
    for (const auto& c : x.node->next) {
      if (c) inputs.push_back(index.at(c.get()));
      else if (opt.constants) inputs.push_back(x.inputs[next_constant++]);
    }
    x.inputs = std::move(inputs);
  }
  return g;
}

// Tags each vertex with its block (see graph_dot.h): in forward order, an op
// takes the block of a named parameter it reads, else its latest input's.
void assign_blocks(Graph& g) {
  std::map<BlockKey, size_t> ids;
  for (size_t i = 0; i < g.v.size(); ++i) {
    Vertex& x = g.v[i];
    if (x.kind == Kind::leaf) {
      if (auto key = block_of(x.name)) {
        auto [it, fresh] = ids.try_emplace(*key, g.blocks.size());
        if (fresh) g.blocks.push_back(*key);
        x.block = it->second;
      }
      continue;
    }
    if (x.kind != Kind::op) continue;
    const Vertex* param = nullptr;  // the first named parameter it reads
    size_t latest = g.v.size();
    for (size_t u : x.inputs) {
      const Vertex& in = g.v[u];
      if (in.kind == Kind::leaf && !in.name.empty() && !param) param = &in;
      if (in.kind != Kind::constant && (latest == g.v.size() || u > latest)) latest = u;
    }
    x.block = param ? param->block : latest < g.v.size() ? g.v[latest].block : std::nullopt;
    for (size_t u : x.inputs)
      if (g.v[u].kind == Kind::constant) g.v[u].block = x.block;
  }
}

std::string shape_line(const Vertex& x) { return fmt::format("{} {}", shape_str(x.shape), dtype_name(x.dtype)); }

// What makes two blocks the same: each member's kind, op, shape, dtype and
// name below the block, and where its inputs come from (a member, or outside).
std::string signature(const Graph& g, size_t b, std::span<const size_t> members) {
  const BlockKey& key = g.blocks[b];
  const std::string own = fmt::format("{}.{}.", key.prefix, key.index);
  std::unordered_map<size_t, size_t> local;
  for (size_t i = 0; i < members.size(); ++i) local[members[i]] = i;
  std::string sig;
  for (size_t m : members) {
    const Vertex& x = g.v[m];
    const std::string name = x.name.starts_with(own) ? x.name.substr(own.size()) : x.name;
    sig += fmt::format("{}|{}|{}|", static_cast<int>(x.kind), x.kind == Kind::op ? x.node->name : name, shape_line(x));
    for (size_t u : x.inputs) sig += local.contains(u) ? fmt::format("L{},", local[u]) : "X,";
    sig += ";";
  }
  return sig;
}

struct Collapse {
  std::vector<size_t> shown;     // vertex -> the vertex drawn for it
  std::vector<std::optional<size_t>> group;  // block -> the first block of its group
  std::vector<std::string> cluster_label;  // per block shown
  std::vector<bool> hidden;      // per block: drawn by an earlier copy
};

std::vector<std::vector<size_t>> block_members(const Graph& g) {
  std::vector<std::vector<size_t>> members(g.blocks.size());
  for (size_t i = 0; i < g.v.size(); ++i)
    if (g.v[i].block) members[*g.v[i].block].push_back(i);
  return members;
}

// The last block of a stack also collects the ops after it that read no
// parameter (a loss after the last layer): where it matches the block before
// it up to such a tail, the tail goes outside.
void trim_tails(Graph& g, const std::vector<size_t>& order) {
  const auto members = block_members(g);
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t prev = order[k - 1], last = order[k];
    if (k + 1 < order.size() && g.blocks[order[k + 1]].prefix == g.blocks[last].prefix) continue;
    if (g.blocks[prev].prefix != g.blocks[last].prefix) continue;
    const auto& a = members[prev];
    const auto& b = members[last];
    if (b.size() <= a.size() || signature(g, prev, a) != signature(g, last, std::span(b).first(a.size()))) continue;
    const bool paramless = std::all_of(b.begin() + static_cast<std::ptrdiff_t>(a.size()), b.end(),
                                       [&](size_t m) { return g.v[m].kind != Kind::leaf; });
    if (!paramless) continue;
    for (size_t m = a.size(); m < b.size(); ++m) g.v[b[m]].block.reset();
  }
}

Collapse collapse(Graph& g, bool on) {
  Collapse c;
  c.shown.resize(g.v.size());
  for (size_t i = 0; i < g.v.size(); ++i) c.shown[i] = i;
  c.group.assign(g.blocks.size(), std::nullopt);
  c.hidden.assign(g.blocks.size(), false);
  c.cluster_label.resize(g.blocks.size());
  if (!on) return c;
  std::vector<size_t> order(g.blocks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return g.blocks[a] < g.blocks[b]; });
  trim_tails(g, order);
  const auto members = block_members(g);
  for (size_t i = 0; i < order.size();) {
    const size_t first = order[i];
    const std::string sig = signature(g, first, members[first]);
    size_t j = i + 1;
    while (j < order.size() && g.blocks[order[j]].prefix == g.blocks[first].prefix &&
           g.blocks[order[j]].index == g.blocks[order[j - 1]].index + 1 && signature(g, order[j], members[order[j]]) == sig)
      ++j;
    const BlockKey& a = g.blocks[first];
    c.cluster_label[first] = j - i == 1 ? fmt::format("{}.{}", a.prefix, a.index)
                                        : fmt::format("{}.{}-{}: {} identical blocks, drawn once", a.prefix, a.index,
                                                      g.blocks[order[j - 1]].index, j - i);
    for (size_t k = i; k < j; ++k) {
      c.group[order[k]] = first;
      if (k == i) continue;
      c.hidden[order[k]] = true;
      for (size_t m = 0; m < members[order[k]].size(); ++m) c.shown[members[order[k]][m]] = members[first][m];
    }
    i = j;
  }
  return c;
}

// "\nsaved <name> <shape> <dtype> <bytes>[ (<shares>)]" per saved tensor, then the total.
std::string saved_lines(const Node& n) {
  std::string out;
  size_t total = 0, own = 0;
  for (const SavedTensor& s : n.saved) {
    if (!s.value.defined()) continue;
    const size_t b = saved_bytes(s);
    total += b;
    if (!s.shares) own += b;
    out += fmt::format("\nsaved {} {} {} {}{}", s.name, shape_str(s.value.shape()), dtype_name(s.value.dtype()),
                       bytes_str(b), s.shares ? " (" + *s.shares + ")" : "");
  }
  if (!out.empty()) out += fmt::format("\nsaved total {}, own {}", bytes_str(total), bytes_str(own));
  return out;
}

std::string vertex_line(const Graph& g, size_t i, const Tensor& root, const DotOptions& opt) {
  const Vertex& x = g.v[i];
  std::string label, attrs;
  if (x.kind == Kind::op) {
    label = x.node->name + "\n" + shape_line(x);
    if (opt.grads && opt.trace)
      for (const TraceRow& r : opt.trace->rows())
        if (r.node == x.node && r.grad.defined) label += fmt::format("\ngrad {} norm {:.4g}", shape_str(r.grad.shape), r.grad.norm);
    if (opt.saved_tensors) label += saved_lines(*x.node);
    if (opt.saved_bytes && x.node->released) label += "\nfreed " + bytes_str(x.node->freed_bytes);
  } else if (x.kind == Kind::leaf) {
    label = (x.name.empty() ? std::string("leaf") : x.name) + "\n" + shape_line(x);
    if (opt.grads) {
      auto leaf = x.node ? x.node->leaf.lock() : root.impl_ptr();
      Tensor grad = leaf ? Tensor(leaf).grad() : Tensor();
      if (grad.defined()) {
        const GradInfo gi = grad_info(grad);
        label += fmt::format("\ngrad {} norm {:.4g}", shape_str(gi.shape), gi.norm);
      }
    }
    attrs = ", shape=box, style=filled, fillcolor=\"#dbe9f6\"";
  } else {
    label = "no grad\n" + shape_line(x);
    attrs = ", shape=box, style=dashed";
  }
  const bool is_root = x.node ? x.node == root.grad_fn().get() : x.kind == Kind::leaf;
  if (is_root) attrs += ", penwidth=2";
  std::string escaped = escape(label);
  for (size_t p = escaped.find('\n'); p != std::string::npos; p = escaped.find('\n', p + 2)) escaped.replace(p, 1, "\\n");
  return fmt::format("n{} [label=\"{}\"{}];\n", i, escaped, attrs);
}

}  // namespace

std::string to_dot(const Tensor& root, const DotOptions& opt) {
  if (!root.defined()) fail<AutogradError>("to_dot", "called on an undefined tensor");
  if (!root.requires_grad())
    fail<AutogradError>("to_dot", "tensor {} has no graph (it does not require grad); hint: draw a tensor computed "
                        "from leaves that require grad, with grad mode on", shape_str(root.shape()));
  if (opt.collapse_repeats && opt.names.empty())
    fail<ValueError>("to_dot", "collapse_repeats needs parameter names; hint: pass .names = model.parameter_names()");
  Graph g = collect(root, opt);
  assign_blocks(g);
  const Collapse c = collapse(g, opt.collapse_repeats);

  std::string out = "digraph attograd {\n  node [fontname=\"Helvetica\", fontsize=10];\n";
  if (opt.collapse_repeats) {
    for (size_t b = 0; b < g.blocks.size(); ++b) {
      if (c.hidden[b]) continue;
      out += fmt::format("  subgraph cluster_{} {{\n    label=\"{}\";\n", b, escape(c.cluster_label[b]));
      for (size_t i = 0; i < g.v.size(); ++i)
        if (g.v[i].block == b) out += "    " + vertex_line(g, i, root, opt);
      out += "  }\n";
    }
  }
  for (size_t i = 0; i < g.v.size(); ++i)
    if (!opt.collapse_repeats || !g.v[i].block) out += "  " + vertex_line(g, i, root, opt);
  std::set<std::tuple<size_t, size_t, bool>> drawn;
  for (size_t i = 0; i < g.v.size(); ++i) {
    for (size_t u : g.v[i].inputs) {
      const std::optional<size_t> bu = g.v[u].block, bi = g.v[i].block;
      const bool repeat = bu && bi && bu != bi && c.group[*bu] && c.group[*bu] == c.group[*bi];
      const size_t a = c.shown[u], b = c.shown[i];
      if (opt.collapse_repeats && !drawn.insert({a, b, repeat}).second) continue;
      out += repeat ? fmt::format("  n{} -> n{} [style=dashed, label=\"repeat\"];\n", a, b)
                    : fmt::format("  n{} -> n{};\n", a, b);
    }
  }
  return out + "}\n";
}

}  // namespace attograd
