#include "ir/graph_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "ir/file_util.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

/// A training-step graph exercising every feature of the format: all node kinds, a
/// multi-output node read through output 1 and 2, attrs of each type (including non-finite
/// floats), phases, module paths, sources, grad pairs (plain and {"node","output"}) and loss.
Graph hand_made() {
  Graph g;
  g.name = "hand/made \"graph\"";
  auto leaf = [&](std::string name, NodeKind kind, std::vector<int64_t> shape, DType t,
                  std::string module = {}) {
    Node n;
    n.name = std::move(name);
    n.kind = kind;
    n.outputs.push_back({std::move(shape), t});
    n.module_path = std::move(module);
    return g.add(std::move(n));
  };
  NodeIdx x = leaf("x", NodeKind::kInput, {8, 2048}, DType::kI64);
  NodeIdx emb = leaf("emb", NodeKind::kParameter, {1000, 64}, DType::kBF16, "tok_embeddings");
  NodeIdx w = leaf("w", NodeKind::kParameter, {64, 64}, DType::kBF16, "layers.0.attention.wq");
  NodeIdx rope = leaf("rope", NodeKind::kBuffer, {2048, 32}, DType::kF32, "freqs_cis");
  NodeIdx h = g.add_op("embedding", "embedding", {{emb, 0}, {x, 0}}, {{8, 2048, 64}, DType::kBF16},
                       Phase::kForward, {{"padding_idx", int64_t{-1}}}, "tok_embeddings");
  Node ln;
  ln.name = "ln";
  ln.op = "native_layer_norm";
  ln.inputs = {{h, 0}};
  ln.outputs = {{{8, 2048, 64}, DType::kBF16}, {{8, 2048, 1}, DType::kF32},
                {{8, 2048, 1}, DType::kF32}};
  ln.attrs = {{"normalized_shape", std::vector<int64_t>{64}},
              {"eps", 1e-5},
              {"keepdim", false},
              {"count", int64_t{1} << 40},
              {"reduce", std::string("mean")},
              {"empty", std::vector<int64_t>{}},
              {"neg_inf", -std::numeric_limits<double>::infinity()},
              {"pos_inf", std::numeric_limits<double>::infinity()},
              {"whole", 2.0},
              {"weird/key~", std::string("line\nbreak \"quoted\" \xc3\xa9")}};
  ln.module_path = "layers.0.attention_norm";
  ln.source = "model.py:12";
  NodeIdx l = g.add(std::move(ln));
  NodeIdx mm = g.add_op("mm_1", "mm", {{l, 0}, {w, 0}}, {{8, 2048, 64}, DType::kBF16});
  NodeIdx mul = g.add_op("mul", "mul.Tensor", {{mm, 0}, {l, 2}}, {{8, 2048, 64}, DType::kBF16});
  NodeIdx loss = g.add_op("loss", "my_custom_op", {{mul, 0}, {rope, 0}}, {{}, DType::kF32});
  Node grads;
  grads.name = "grads";
  grads.op = "mm_backward";
  grads.phase = Phase::kBackward;
  grads.inputs = {{loss, 0}, {l, 1}};
  grads.outputs = {{{1000, 64}, DType::kBF16}, {{64, 64}, DType::kBF16}};
  NodeIdx gr = g.add(std::move(grads));
  NodeIdx upd = g.add_op("sgd", "add_", {{w, 0}, {gr, 1}}, {{64, 64}, DType::kBF16},
                         Phase::kOptimizer, {{"alpha", -0.01}});
  Node out;
  out.name = "out";
  out.kind = NodeKind::kOutput;
  out.inputs = {{loss, 0}, {upd, 0}, {gr, 0}};
  g.add(std::move(out));
  g.grad_pairs = {{emb, {gr, 0}}, {w, {gr, 1}}};
  g.loss = TensorRef{loss, 0};
  EXPECT_EQ(g.validate(), "");
  return g;
}

void expect_same(const Graph& a, const Graph& b) {
  EXPECT_EQ(a.name, b.name);
  ASSERT_EQ(a.size(), b.size());
  for (NodeIdx i = 0; i < a.size(); ++i) {
    const Node& x = a.node(i);
    const Node& y = b.node(i);
    SCOPED_TRACE(x.name);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.phase, y.phase);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.outputs, y.outputs);
    EXPECT_EQ(x.attrs, y.attrs);
    EXPECT_EQ(x.module_path, y.module_path);
    EXPECT_EQ(x.source, y.source);
  }
  ASSERT_EQ(a.grad_pairs.size(), b.grad_pairs.size());
  for (size_t k = 0; k < a.grad_pairs.size(); ++k) {
    EXPECT_EQ(a.grad_pairs[k].param, b.grad_pairs[k].param);
    EXPECT_EQ(a.grad_pairs[k].grad, b.grad_pairs[k].grad);
  }
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.tangents, b.tangents);
  ASSERT_EQ(a.islands.size(), b.islands.size());
  for (size_t k = 0; k < a.islands.size(); ++k) {
    EXPECT_EQ(a.islands[k].module, b.islands[k].module);
    EXPECT_EQ(a.islands[k].sources, b.islands[k].sources);
  }
}

TEST(GraphJson, RoundTrip) {
  Graph g = hand_made();
  std::string text = write_graph_json(g);
  Graph back = read_graph_json(text, "mem.json");
  expect_same(g, back);
  // Attribute types survive: 2.0 stays a double, 1<<40 an int, [] a list.
  const Node& ln = back.node(*back.find("ln"));
  EXPECT_TRUE(std::holds_alternative<double>(ln.attrs.at("whole")));
  EXPECT_TRUE(std::holds_alternative<int64_t>(ln.attrs.at("count")));
  EXPECT_TRUE(std::holds_alternative<bool>(ln.attrs.at("keepdim")));
  EXPECT_TRUE(std::holds_alternative<std::vector<int64_t>>(ln.attrs.at("empty")));
  EXPECT_EQ(ln.attr_double("neg_inf", 0), -std::numeric_limits<double>::infinity());
}

TEST(GraphJson, ComplexDtypes) {
  // A rotary's view_as_complex; PyTorch's spellings read, the short names written.
  const std::string text = R"({"format": "autoshard-graph", "version": 1, "nodes": [
    {"name": "x", "kind": "input", "outputs": [{"shape": [4, 8, 2], "dtype": "f32"}]},
    {"name": "f", "kind": "buffer", "outputs": [{"shape": [8], "dtype": "torch.complex128"}]},
    {"name": "z", "kind": "op", "op": "view_as_complex", "inputs": ["x"],
     "outputs": [{"shape": [4, 8], "dtype": "complex64"}]},
    {"name": "out", "kind": "output", "inputs": ["z", "f"]}]})";
  Graph g = read_graph_json(text, "c.json");
  EXPECT_EQ(g.meta({*g.find("z"), 0}).dtype, DType::kC64);
  EXPECT_EQ(g.meta({*g.find("f"), 0}).dtype, DType::kC128);
  const std::string written = write_graph_json(g);
  EXPECT_THAT(written, HasSubstr(R"("dtype":"c64")"));
  EXPECT_THAT(written, HasSubstr(R"("dtype":"c128")"));
  expect_same(g, read_graph_json(written, "c2.json"));
}

TEST(GraphJson, TangentsRoundTripAndNameNodes) {
  Graph g = hand_made();
  g.tangents = {*g.find("ln")};
  const std::string text = write_graph_json(g);
  EXPECT_NE(text.find("\"tangents\": [\"ln\"]"), std::string::npos);
  expect_same(g, read_graph_json(text, "mem.json"));
  std::string bad = text;
  bad.replace(bad.find("[\"ln\"]"), 6, "[\"zz\"]");
  try {
    read_graph_json(bad, "bad.json");
    FAIL() << "an unknown tangent node was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown node 'zz'"), std::string::npos) << e.what();
  }
}

TEST(GraphJson, EagerIslandsRoundTrip) {
  Graph g = hand_made();
  g.islands = {{"layers.0.moe", {"moe.py:41", "moe.py:44"}}, {"block", {}}};
  const std::string text = write_graph_json(g);
  EXPECT_THAT(text, HasSubstr(R"("islands": [{"module":"layers.0.moe","sources":["moe.py:41","moe.py:44"]})"));
  expect_same(g, read_graph_json(text, "mem.json"));
}

TEST(GraphJson, NaNAttributeRoundTrips) {
  Graph g = hand_made();
  g.node(*g.find("sgd")).attrs["nan"] = std::numeric_limits<double>::quiet_NaN();
  Graph back = read_graph_json(write_graph_json(g), "mem.json");
  EXPECT_TRUE(std::isnan(back.node(*back.find("sgd")).attr_double("nan", 0)));
}

TEST(GraphJson, RewriteIsByteIdentical) {
  Graph g = hand_made();
  std::string a = write_graph_json(g);
  std::string b = write_graph_json(read_graph_json(a, "a.json"));
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, write_graph_json(g));
}

TEST(GraphJson, WriterLayout) {
  std::string text = write_graph_json(hand_made());
  EXPECT_TRUE(text.starts_with(R"({"format": "autoshard-graph", "version": 1, "name": )"));
  EXPECT_TRUE(text.ends_with("}\n"));
  // One node per line; output 0 references are plain names, others {"node","output"}.
  EXPECT_THAT(text, HasSubstr("\n  {\"name\":\"x\",\"kind\":\"input\",\"outputs\":[{\"shape\":"
                              "[8,2048],\"dtype\":\"i64\"}]},\n"));
  EXPECT_THAT(text, HasSubstr(R"("inputs":["mm_1",{"node":"ln","output":2}])"));
  EXPECT_THAT(text, HasSubstr(R"({"param":"w","grad":{"node":"grads","output":1}})"));
  EXPECT_THAT(text, HasSubstr(R"("phase":"backward")"));
  EXPECT_THAT(text, Not(HasSubstr(R"("phase":"forward")")));  // the default is omitted
  EXPECT_THAT(text, HasSubstr(R"("neg_inf":{"float":"-inf"})"));
  EXPECT_THAT(text, HasSubstr(R"("eps":1e-05)"));
  EXPECT_THAT(text, HasSubstr(R"("whole":2.0)"));
  EXPECT_THAT(text, HasSubstr(R"("loss": "loss"})"));
}

TEST(GraphJson, ReadsTheDocumentedExample) {
  // The example of docs/graph-format.md, including PyTorch dtype spellings and defaults.
  const char* text = R"({"format": "autoshard-graph", "version": 1, "name": "tiny",
   "nodes": [
    {"name": "x", "kind": "input", "outputs": [{"shape": [8, 16], "dtype": "torch.bfloat16"}]},
    {"name": "w", "kind": "parameter", "outputs": [{"shape": [16, 16], "dtype": "bf16"}],
     "module": "proj"},
    {"name": "ln", "kind": "op", "op": "native_layer_norm", "inputs": ["x"],
     "attrs": {"normalized_shape": [16], "eps": 1e-5, "weight": null},
     "outputs": [{"shape": [8, 16], "dtype": "bf16"}, {"shape": [8, 1], "dtype": "float32"},
                 {"shape": [8, 1], "dtype": "f32"}]},
    {"name": "mm_1", "kind": "op", "op": "mm", "inputs": ["ln", "w"],
     "attrs": {"dim": [1], "keepdim": false, "reduce": "mean", "k": 3},
     "outputs": [{"shape": [8, 16], "dtype": "bf16"}], "source": "model.py:12"},
    {"name": "loss", "kind": "op", "op": "sum", "inputs": [{"node": "mm_1"}],
     "outputs": [{"shape": [], "dtype": "f32"}]},
    {"name": "gw", "kind": "op", "op": "mm", "phase": "backward",
     "inputs": [{"node": "ln", "output": 2}, "loss"],
     "outputs": [{"shape": [16, 16], "dtype": "bf16"}], "_comment": "ignored"},
    {"name": "out", "kind": "output", "inputs": ["loss", "gw"]}
   ],
   "grad_pairs": [{"param": "w", "grad": "gw"}],
   "loss": "loss", "_generator": "test"})";
  Graph g = read_graph_json(text, "doc.json");
  EXPECT_EQ(g.name, "tiny");
  ASSERT_EQ(g.size(), 7);
  EXPECT_EQ(g.node(0).out().dtype, DType::kBF16);
  EXPECT_EQ(g.node(1).module_path, "proj");
  EXPECT_EQ(g.node(2).outputs.size(), 3u);
  EXPECT_FALSE(g.node(2).has_attr("weight"));  // null = absent
  EXPECT_EQ(g.node(3).inputs, (std::vector<TensorRef>{{2, 0}, {1, 0}}));
  EXPECT_EQ(g.node(3).attr_ints("dim"), (std::vector<int64_t>{1}));
  EXPECT_EQ(g.node(3).attr_int("k", 0), 3);
  EXPECT_EQ(g.node(3).attr_string("reduce", ""), "mean");
  EXPECT_EQ(g.node(3).phase, Phase::kForward);
  EXPECT_EQ(g.node(3).source, "model.py:12");
  EXPECT_EQ(g.node(4).inputs[0], (TensorRef{3, 0}));
  EXPECT_EQ(g.node(5).phase, Phase::kBackward);
  EXPECT_EQ(g.node(5).inputs[0], (TensorRef{2, 2}));
  EXPECT_EQ(g.node(6).kind, NodeKind::kOutput);
  ASSERT_EQ(g.grad_pairs.size(), 1u);
  EXPECT_EQ(g.grad_pairs[0].param, 1);
  EXPECT_EQ(g.grad_pairs[0].grad, (TensorRef{5, 0}));
  EXPECT_EQ(g.loss, (TensorRef{4, 0}));
}

TEST(GraphJson, EmptyGraph) {
  Graph g;
  std::string text = write_graph_json(g);
  EXPECT_EQ(text, "{\"format\": \"autoshard-graph\", \"version\": 1, \"name\": \"\",\n"
                  " \"nodes\": []}\n");
  Graph back = read_graph_json(text, "e.json");
  EXPECT_EQ(back.size(), 0);
  EXPECT_FALSE(back.loss);
}

TEST(GraphJson, WriterRejectsInvalidGraph) {
  Graph g = hand_made();
  g.node(5).inputs[0].node = 99;
  try {
    write_graph_json(g);
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot write graph"));
    EXPECT_THAT(e.what(), HasSubstr("node 'ln': input 0 refers to node #99"));
  }
}

TEST(GraphJson, SaveAndLoadFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fs::path("autoshard_graph_json_test");
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string path = (dir / "g.json").string();
  Graph g = hand_made();
  save_graph_file(g, path);
  save_graph_file(g, path);  // overwriting works too
  expect_same(g, load_graph_file(path));
  EXPECT_EQ(read_text_file(path), write_graph_json(g));
  // No temporaries are left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // A failing save leaves no file (the directory does not exist).
  std::string bad = (dir / "missing" / "g.json").string();
  EXPECT_THROW(save_graph_file(g, bad), std::runtime_error);
  EXPECT_FALSE(fs::exists(bad));
  // A failed write never clobbers the previous content: an invalid graph throws first.
  Graph broken = g;
  broken.node(5).inputs[0].node = 99;
  EXPECT_THROW(save_graph_file(broken, path), std::runtime_error);
  expect_same(g, load_graph_file(path));
  fs::remove_all(dir);
}

TEST(GraphJson, LoadMissingFile) {
  try {
    load_graph_file("/nonexistent/dir/g.json");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/g.json: cannot open file"));
  }
}

// ---- one test per error kind ------------------------------------------------------------

/// Valid nodes used as context by the error tests: x (input), w (parameter), ln (3 outputs).
std::string doc(const std::string& nodes, const std::string& tail = "") {
  return R"({"format": "autoshard-graph", "version": 1, "name": "t", "nodes": [
  {"name": "x", "kind": "input", "outputs": [{"shape": [4, 8], "dtype": "bf16"}]},
  {"name": "w", "kind": "parameter", "outputs": [{"shape": [8, 8], "dtype": "bf16"}]},
  {"name": "ln", "kind": "op", "op": "native_layer_norm", "inputs": ["x"],
   "outputs": [{"shape": [4, 8], "dtype": "bf16"}, {"shape": [4, 1], "dtype": "f32"},
               {"shape": [4, 1], "dtype": "f32"}]})" +
         (nodes.empty() ? "" : ",\n  " + nodes) + "]" + tail + "}";
}

/// Reads `text` expecting failure; returns the message and checks it is one line, starts with
/// the origin and contains each of `parts`.
std::string error_of(const std::string& text, std::initializer_list<const char*> parts) {
  try {
    read_graph_json(text, "bad.json");
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_TRUE(msg.starts_with("bad.json: ")) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const char* p : parts) EXPECT_THAT(msg, HasSubstr(p));
    return msg;
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return {};
}

TEST(GraphJsonErrors, MalformedJson) {
  error_of("{\"format\": \"autoshard-graph\",\n \"version\": 1,\n \"nodes\": [tru]}",
           {"malformed JSON at line 3, column 15 (byte 59): syntax error"});
  error_of("{\"format\": \"autoshard-graph\"", {"malformed JSON at line 1"});
  error_of("", {"malformed JSON at line 1, column 1 (byte 0)"});
  // A huge unterminated string does not end up in the message.
  std::string msg = error_of("{\"name\": \"" + std::string(100000, 'a'), {"malformed JSON"});
  EXPECT_LT(msg.size(), 400u);
}

TEST(GraphJsonErrors, NotAnObject) {
  error_of("[1, 2]", {"top level: expected an object, got array"});
}

TEST(GraphJsonErrors, WrongFormat) {
  error_of(R"({"format": "iopddl", "version": 1, "nodes": []})",
           {"/format: not an autoshard graph: format 'iopddl'"});
  error_of(R"({"version": 1, "nodes": []})", {"top level: missing field 'format'"});
}

TEST(GraphJsonErrors, WrongVersion) {
  error_of(R"({"format": "autoshard-graph", "version": 2, "nodes": []})",
           {"/version: unsupported version 2 (this build reads version 1)"});
  error_of(R"({"format": "autoshard-graph", "version": "1", "nodes": []})",
           {"/version: expected an integer, got string"});
  error_of(R"({"format": "autoshard-graph", "version": 1.5, "nodes": []})",
           {"/version: expected an integer, got number 1.5"});
}

TEST(GraphJsonErrors, UnknownTopLevelField) {
  error_of(doc("", R"(, "los": "ln")"), {"/los: unknown field"});
}

TEST(GraphJsonErrors, MissingNodes) {
  error_of(R"({"format": "autoshard-graph", "version": 1})", {"missing field 'nodes'"});
  error_of(R"({"format": "autoshard-graph", "version": 1, "nodes": {}})",
           {"/nodes: expected an array, got object"});
}

TEST(GraphJsonErrors, UnknownKind) {
  error_of(doc(R"({"name": "p", "kind": "placeholder", "outputs": []})"),
           {"/nodes/3/kind (node 'p'): unknown kind 'placeholder'"});
}

TEST(GraphJsonErrors, UnknownDtype) {
  error_of(doc(R"({"name": "y", "kind": "input", "outputs": [{"shape": [1], "dtype": "f128"}]})"),
           {"/nodes/3/outputs/0/dtype (node 'y'): unknown dtype 'f128'"});
}

TEST(GraphJsonErrors, UnknownPhase) {
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "phase": "fwd", "inputs": ["x"],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/phase (node 'y'): unknown phase 'fwd'"});
}

TEST(GraphJsonErrors, UnknownNodeField) {
  error_of(doc(R"({"name": "y", "kind": "input", "modul": "a",
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/modul (node 'y'): unknown field"});
}

TEST(GraphJsonErrors, MissingFields) {
  error_of(doc(R"({"kind": "input", "outputs": []})"), {"/nodes/3: missing field 'name'"});
  error_of(doc(R"({"name": "y", "outputs": []})"),
           {"/nodes/3 (node 'y'): missing field 'kind'"});
  error_of(doc(R"({"name": "y", "kind": "op", "inputs": ["x"],
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3 (node 'y'): missing field 'op'"});
  error_of(doc(R"({"name": "y", "kind": "input"})"),
           {"/nodes/3 (node 'y'): missing field 'outputs'"});
  error_of(doc(R"({"name": "y", "kind": "input", "outputs": [{"dtype": "f32"}]})"),
           {"/nodes/3/outputs/0 (node 'y'): missing field 'shape'"});
  error_of(doc(R"({"name": "y", "kind": "input", "outputs": [{"shape": [2]}]})"),
           {"/nodes/3/outputs/0 (node 'y'): missing field 'dtype'"});
  error_of(doc(R"({"name": "y", "kind": "input", "outputs": []})"),
           {"/nodes/3/outputs (node 'y'): a node must produce at least one tensor"});
}

TEST(GraphJsonErrors, BadShape) {
  error_of(doc(R"({"name": "y", "kind": "input", "outputs": [{"shape": [2, -1], "dtype": "f32"}]})"),
           {"/nodes/3/outputs/0/shape/1 (node 'y'): negative dimension -1"});
  error_of(doc(R"({"name": "y", "kind": "input", "outputs": [{"shape": [2.5], "dtype": "f32"}]})"),
           {"/nodes/3/outputs/0/shape/0 (node 'y'): expected an integer"});
  error_of(doc(R"({"name": "y", "kind": "input",
                   "outputs": [{"shape": [18446744073709551615], "dtype": "f32"}]})"),
           {"/nodes/3/outputs/0/shape/0 (node 'y'): integer 18446744073709551615 out of range"});
}

TEST(GraphJsonErrors, WrongTypes) {
  error_of(doc(R"({"name": 7, "kind": "input"})"),
           {"/nodes/3/name: expected a string, got integer 7"});
  error_of(doc(R"("x2")"), {"/nodes/3: expected an object, got string"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": "x",
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/inputs (node 'y'): expected an array, got string"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": [3],
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/inputs/0 (node 'y'): expected a node name or"});
}

TEST(GraphJsonErrors, BadIslands) {
  error_of(doc("", R"(, "islands": {"module": "m"})"), {"/islands: expected an array, got object"});
  error_of(doc("", R"(, "islands": [{"sources": []}])"), {"/islands/0: missing field 'module'"});
  error_of(doc("", R"(, "islands": [{"module": "m", "sources": [3]}])"),
           {"/islands/0/sources/0: expected a string, got integer 3"});
  error_of(doc("", R"(, "islands": [{"module": "m", "line": 3}])"), {"/islands/0/line: unknown field"});
}

TEST(GraphJsonErrors, BadAttr) {
  error_of(doc(R"({"name": "y", "kind": "op", "op": "sum", "inputs": ["x"],
                   "attrs": {"dim": [1, "a"]}, "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/attrs/dim/1 (node 'y'): attribute lists hold integers only, got string"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "sum", "inputs": ["x"],
                   "attrs": {"dim": {"a": 1}}, "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/attrs/dim/a (node 'y'): unknown field"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "sum", "inputs": ["x"],
                   "attrs": {"v": {"float": "infinity"}},
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/attrs/v/float (node 'y'): expected \"inf\", \"-inf\" or \"nan\""});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "sum", "inputs": ["x"],
                   "attrs": {"a/b": [[1]]}, "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/attrs/a~1b/0 (node 'y'): attribute lists hold integers only, got array"});
}

TEST(GraphJsonErrors, UnknownReference) {
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": ["x", "nope"],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/inputs/1 (node 'y'): refers to unknown node 'nope'"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": [{"node": "nope"}],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/inputs/0/node (node 'y'): refers to unknown node 'nope'"});
}

TEST(GraphJsonErrors, LaterReference) {
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": ["z"],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]},
                  {"name": "z", "kind": "op", "op": "relu", "inputs": ["x"],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/inputs/0 (node 'y'): refers to node 'z' defined later at /nodes/4"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": ["y"],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/inputs/0 (node 'y'): node 'y' refers to itself"});
}

TEST(GraphJsonErrors, BadOutputIndex) {
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": [{"node": "ln", "output": 3}],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/inputs/0 (node 'y'): refers to output 3 of 'ln', which has 3 outputs"});
  error_of(doc(R"({"name": "y", "kind": "op", "op": "relu", "inputs": [{"node": "x", "output": -1}],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/3/inputs/0/output (node 'y'): negative output index -1"});
  error_of(doc(R"({"name": "o", "kind": "output", "inputs": ["x"]},
                  {"name": "y", "kind": "op", "op": "relu", "inputs": ["o"],
                   "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
           {"/nodes/4/inputs/0 (node 'y'): refers to output 0 of 'o', which has 0 outputs"});
}

TEST(GraphJsonErrors, DuplicateNames) {
  error_of(doc(R"({"name": "w", "kind": "input", "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/name: duplicate node name 'w' (first defined at /nodes/1)"});
}

TEST(GraphJsonErrors, LeafWithInputs) {
  error_of(doc(R"({"name": "b", "kind": "buffer", "inputs": ["x"],
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/inputs (node 'b'): a buffer node takes no inputs"});
}

TEST(GraphJsonErrors, OutputNodeWithOutputs) {
  error_of(doc(R"({"name": "o", "kind": "output", "inputs": ["x"],
                   "outputs": [{"shape": [1], "dtype": "f32"}]})"),
           {"/nodes/3/outputs (node 'o'): an output node produces no tensors"});
}

TEST(GraphJsonErrors, GradPairs) {
  error_of(doc("", R"(, "grad_pairs": [{"param": "nope", "grad": "ln"}])"),
           {"/grad_pairs/0/param: refers to unknown node 'nope'"});
  error_of(doc("", R"(, "grad_pairs": [{"param": "x", "grad": "ln"}])"),
           {"/grad_pairs/0/param: 'x' is not a parameter (kind input)"});
  error_of(doc("", R"(, "grad_pairs": [{"param": "w", "grad": {"node": "ln", "output": 5}}])"),
           {"/grad_pairs/0/grad: refers to output 5 of 'ln', which has 3 outputs"});
  error_of(doc("", R"(, "grad_pairs": [{"param": "w"}])"),
           {"/grad_pairs/0: missing field 'grad'"});
}

TEST(GraphJsonErrors, GradPairShapeMismatch) {
  // Detected by Graph::validate(), whose message is prefixed.
  error_of(doc("", R"(, "grad_pairs": [{"param": "w", "grad": "ln"}])"),
           {"bad.json: invalid graph: gradient pair of 'w': gradient 'ln' output 0 has shape "
            "[4, 8], parameter has [8, 8]"});
}

TEST(GraphJsonErrors, Loss) {
  error_of(doc("", R"(, "loss": "nope")"), {"/loss: refers to unknown node 'nope'"});
  error_of(doc("", R"(, "loss": {"node": "ln", "output": 9})"),
           {"/loss: refers to output 9 of 'ln'"});
}

TEST(GraphJson, NoneOutputsAreAccepted) {
  Graph g = read_graph_json(
      doc(R"({"name": "y", "kind": "op", "op": "convolution_backward", "inputs": ["x"],
              "outputs": [{"shape": [4, 8], "dtype": "bf16"},
                          {"shape": [0], "dtype": "bf16", "none": true}]})"),
      "ok.json");
  EXPECT_EQ(g.node(3).out(1).bytes(), 0);
  error_of(doc(R"({"name": "y", "kind": "input",
                   "outputs": [{"shape": [0], "dtype": "bf16", "none": 1}]})"),
           {"/nodes/3/outputs/0/none (node 'y'): expected true or false"});
}

TEST(GraphJsonErrors, UnknownOpIsAccepted) {
  Graph g = read_graph_json(
      doc(R"({"name": "y", "kind": "op", "op": "my_lib::fancy", "inputs": ["x"],
              "outputs": [{"shape": [4, 8], "dtype": "bf16"}]})"),
      "ok.json");
  EXPECT_EQ(g.node(3).op, "my_lib::fancy");
}

}  // namespace
}  // namespace autoshard
