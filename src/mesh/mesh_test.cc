#include "mesh/mesh.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "mesh/hardware.h"

namespace autoshard {
namespace {

using ::testing::HasSubstr;

Hardware h100() { return *hardware_preset("h100"); }

template <typename F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return {};
}

template <typename F>
std::string runtime_error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "expected std::runtime_error";
  return {};
}

TEST(ParseShape, Forms) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(Mesh::parse_shape("2x8"), (V{2, 8}));
  EXPECT_EQ(Mesh::parse_shape("2X8"), (V{2, 8}));
  EXPECT_EQ(Mesh::parse_shape("2,8"), (V{2, 8}));
  EXPECT_EQ(Mesh::parse_shape("2*4*2"), (V{2, 4, 2}));
  EXPECT_EQ(Mesh::parse_shape("8"), (V{8}));
  EXPECT_EQ(Mesh::parse_shape(" 4 x 2 "), (V{4, 2}));
  EXPECT_EQ(Mesh::parse_shape("(2, 8)"), (V{2, 8}));
  EXPECT_EQ(Mesh::parse_shape("(16,)"), (V{16}));
  EXPECT_EQ(Mesh::parse_shape("[4,4]"), (V{4, 4}));
}

TEST(ParseShape, Errors) {
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape(""); }), HasSubstr("empty"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("()"); }), HasSubstr("empty"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("2x"); }),
              HasSubstr("mesh shape '2x': '' at position 2 is not a positive integer"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("2xa"); }),
              HasSubstr("'a' at position 2"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("0x8"); }),
              HasSubstr("'0' at position 0"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("2x-8"); }), HasSubstr("'-8'"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("2x8.5"); }), HasSubstr("'8.5'"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("2,,8"); }), HasSubstr("''"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_shape("99999999999999999999"); }),
              HasSubstr("not a positive integer"));
}

TEST(ParseNames, Forms) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Mesh::parse_names("dp,tp"), (V{"dp", "tp"}));
  EXPECT_EQ(Mesh::parse_names("dp, tp , pp"), (V{"dp", "tp", "pp"}));
  EXPECT_EQ(Mesh::parse_names("data_parallel"), (V{"data_parallel"}));
  EXPECT_TRUE(Mesh::parse_names("").empty());
  EXPECT_TRUE(Mesh::parse_names("  ").empty());
}

TEST(ParseNames, Errors) {
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_names("dp,"); }),
              HasSubstr("empty name in item 1"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_names(",tp"); }),
              HasSubstr("empty name in item 0"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_names("dp,dp"); }),
              HasSubstr("duplicate 'dp'"));
  EXPECT_THAT(invalid_argument_of([] { Mesh::parse_names("d p"); }),
              HasSubstr("'d p' has character ' '"));
}

TEST(Mesh, InterNodeDetection2x8) {
  Hardware hw = h100();
  ASSERT_EQ(hw.gpus_per_node, 8);
  Mesh m({2, 8}, {"dp", "tp"}, hw);
  EXPECT_EQ(m.ndim(), 2);
  EXPECT_EQ(m.num_devices(), 16);
  EXPECT_TRUE(m.dim(0).inter_node);
  EXPECT_FALSE(m.dim(1).inter_node);
  EXPECT_DOUBLE_EQ(m.dim(0).busbw_gbps, hw.inter_busbw_gbps);
  EXPECT_DOUBLE_EQ(m.dim(1).busbw_gbps, hw.intra_busbw_gbps);
  EXPECT_DOUBLE_EQ(m.dim(0).latency_us, hw.inter_latency_us);
  EXPECT_DOUBLE_EQ(m.dim(1).latency_us, hw.intra_latency_us);
  EXPECT_EQ(m.describe(), "2x8 (dp, tp)");
  EXPECT_EQ(m.shape(), (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(m.names(), (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(m.size(1), 8);
}

TEST(Mesh, InterNodeDetection1D) {
  Mesh big({16}, {}, h100());
  EXPECT_TRUE(big.dim(0).inter_node);
  EXPECT_EQ(big.dim(0).name, "d0");
  Mesh node({8}, {}, h100());
  EXPECT_FALSE(node.dim(0).inter_node);
}

TEST(Mesh, InterNodeDetectionMore) {
  // 4x4 on 8-GPU nodes: the last dim fits in a node (4), the first does not (16).
  Mesh m({4, 4}, {}, h100());
  EXPECT_TRUE(m.dim(0).inter_node);
  EXPECT_FALSE(m.dim(1).inter_node);
  // 2x2x2 fits in one node entirely.
  Mesh s({2, 2, 2}, {}, h100());
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(s.dim(i).inter_node);
  // With 4 GPUs per node, 2x8's last dim is already inter-node.
  Hardware hw = h100();
  hw.gpus_per_node = 4;
  Mesh t({2, 8}, {"dp", "tp"}, hw);
  EXPECT_TRUE(t.dim(0).inter_node);
  EXPECT_TRUE(t.dim(1).inter_node);
}

TEST(Mesh, Gloo) {
  Mesh m({2, 8}, {}, h100(), CommBackend::kGloo);
  EXPECT_EQ(m.backend(), CommBackend::kGloo);
  EXPECT_DOUBLE_EQ(m.dim(1).busbw_gbps, 12.5);
  EXPECT_DOUBLE_EQ(m.dim(0).busbw_gbps, 12.5);
}

TEST(Mesh, ConstructorErrors) {
  EXPECT_THAT(invalid_argument_of([] { Mesh({}, {}, h100()); }), HasSubstr("empty shape"));
  EXPECT_THAT(invalid_argument_of([] { Mesh({2, 0}, {}, h100()); }),
              HasSubstr("dim 1 has size 0"));
  EXPECT_THAT(invalid_argument_of([] { Mesh({2, 8}, {"dp"}, h100()); }),
              HasSubstr("2 dims but 1 names"));
  EXPECT_THAT(invalid_argument_of([] { Mesh({2, 8}, {"dp", "dp"}, h100()); }),
              HasSubstr("duplicate dim name 'dp'"));
  EXPECT_THAT(invalid_argument_of([] { Mesh({2, 8}, {"dp", ""}, h100()); }),
              HasSubstr("empty dim name"));
}

// Figures from ../shared/reference/cost-model.md §3 (dense peaks) and §2 (measured busbw).
TEST(Hardware, Presets) {
  EXPECT_EQ(hardware_preset_names(),
            (std::vector<std::string>{"a100", "h100", "h100-500w", "h200", "b200"}));
  constexpr int64_t kGB = 1000LL * 1000 * 1000;
  Hardware a = *hardware_preset("a100");
  EXPECT_DOUBLE_EQ(a.peak_bf16_tflops, 312);
  EXPECT_DOUBLE_EQ(a.peak_fp32_tflops, 19.5);
  EXPECT_DOUBLE_EQ(a.hbm_gbps, 2039);
  EXPECT_EQ(a.memory_bytes, 80 * kGB);
  EXPECT_DOUBLE_EQ(a.nvlink_gbps, 600);
  EXPECT_DOUBLE_EQ(a.intra_busbw_gbps, 230);
  Hardware h = *hardware_preset("h100");
  EXPECT_DOUBLE_EQ(h.peak_bf16_tflops, 989);  // dense, not the 1979 sparse figure
  EXPECT_DOUBLE_EQ(h.peak_fp32_tflops, 67);
  EXPECT_DOUBLE_EQ(h.hbm_gbps, 3350);
  EXPECT_EQ(h.memory_bytes, 80 * kGB);
  EXPECT_DOUBLE_EQ(h.nvlink_gbps, 900);
  EXPECT_DOUBLE_EQ(h.intra_busbw_gbps, 370);
  EXPECT_DOUBLE_EQ(h.inter_busbw_gbps, 47);
  Hardware h2 = *hardware_preset("h200");
  EXPECT_DOUBLE_EQ(h2.peak_bf16_tflops, 989);
  EXPECT_DOUBLE_EQ(h2.peak_fp32_tflops, 67);
  EXPECT_DOUBLE_EQ(h2.hbm_gbps, 4800);
  EXPECT_EQ(h2.memory_bytes, 141 * kGB);
  EXPECT_DOUBLE_EQ(h2.nvlink_gbps, 900);
  Hardware b = *hardware_preset("b200");
  EXPECT_DOUBLE_EQ(b.peak_bf16_tflops, 2250);
  EXPECT_DOUBLE_EQ(b.peak_fp32_tflops, 75);
  EXPECT_DOUBLE_EQ(b.hbm_gbps, 7700);
  EXPECT_EQ(b.memory_bytes, 180 * kGB);
  EXPECT_DOUBLE_EQ(b.nvlink_gbps, 1800);
  for (const auto& name : hardware_preset_names()) {
    Hardware x = *hardware_preset(name);
    EXPECT_EQ(x.name, name);
    EXPECT_EQ(x.gpus_per_node, 8);
    EXPECT_DOUBLE_EQ(x.intra_latency_us, 0.6);  // NCCL tuning.cc LL
    EXPECT_DOUBLE_EQ(x.inter_latency_us, 2.7);
    EXPECT_DOUBLE_EQ(x.base_latency_us, 6.6);
    EXPECT_GT(x.intra_busbw_gbps, x.inter_busbw_gbps);
  }
}

// torchtitan's Grand Teton hosts (benchmarks/llama3_h100_202412_torchtitan.md): 96 GB HBM2e at
// 2.4 TB/s, 500 W power limit; the peak is the midpoint of the SXM (989) and NVL (835.5) bounds
// that file's footnote gives.  Everything else is H100's.
TEST(Hardware, H100PowerCapped) {
  constexpr int64_t kGB = 1000LL * 1000 * 1000;
  const Hardware h = *hardware_preset("h100");
  const Hardware c = *hardware_preset("H100-500W");
  EXPECT_EQ(c.name, "h100-500w");
  EXPECT_DOUBLE_EQ(c.peak_bf16_tflops, 912);
  EXPECT_GT(c.peak_bf16_tflops, 835.5);
  EXPECT_LT(c.peak_bf16_tflops, h.peak_bf16_tflops);
  EXPECT_DOUBLE_EQ(c.peak_fp32_tflops, 63.5);
  EXPECT_DOUBLE_EQ(c.hbm_gbps, 2400);
  EXPECT_EQ(c.memory_bytes, 96 * kGB);
  EXPECT_DOUBLE_EQ(c.nvlink_gbps, h.nvlink_gbps);
  EXPECT_DOUBLE_EQ(c.intra_busbw_gbps, h.intra_busbw_gbps);
  EXPECT_DOUBLE_EQ(c.inter_busbw_gbps, h.inter_busbw_gbps);
  EXPECT_DOUBLE_EQ(c.efficiency, h.efficiency);
  // A base for hardware JSON like any preset.
  EXPECT_DOUBLE_EQ(parse_hardware_json(R"({"base": "h100-500w"})", "hw.json").hbm_gbps, 2400);
}

TEST(Hardware, PresetAliases) {
  for (const char* n : {"A100", "a100-80gb", "A100-80GB-SXM", "a100-sxm4-80gb"})
    EXPECT_EQ(hardware_preset(n)->name, "a100") << n;
  for (const char* n : {"H100", "h100-sxm", "h100-sxm5", "h100_sxm", "H100SXM"})
    EXPECT_EQ(hardware_preset(n)->name, "h100") << n;
  EXPECT_FALSE(hardware_preset("v100"));
  EXPECT_FALSE(hardware_preset(""));
  EXPECT_FALSE(hardware_preset("sxm"));
}

TEST(Hardware, PeakFlops) {
  Hardware h = *hardware_preset("h100");
  EXPECT_DOUBLE_EQ(h.peak_flops(DType::kBF16), 989e12);
  EXPECT_DOUBLE_EQ(h.peak_flops(DType::kF16), 989e12);
  EXPECT_DOUBLE_EQ(h.peak_flops(DType::kF32), 67e12);
  EXPECT_DOUBLE_EQ(h.peak_flops(DType::kC64), 67e12);  // complex runs on its f32 parts
  EXPECT_DOUBLE_EQ(h.peak_flops(DType::kC128), 67e12);
  // Dense FP8 is twice dense BF16 on Hopper and Blackwell (vendor datasheets); A100 has none.
  EXPECT_DOUBLE_EQ(h.peak_fp8_tflops, 1979);
  EXPECT_DOUBLE_EQ(hardware_preset("h100-500w")->peak_fp8_tflops, (1979 + 1670.5) / 2);
  EXPECT_DOUBLE_EQ(hardware_preset("b200")->peak_fp8_tflops, 4500);
  EXPECT_DOUBLE_EQ(hardware_preset("a100")->peak_fp8_tflops, 0);
}

TEST(HardwareJson, BasePreset) {
  Hardware hw = parse_hardware_json(
      R"({"base": "h100", "name": "my-h100", "inter_busbw_gbps": 25, "gpus_per_node": 4,
          "memory_gb": 94})",
      "hw.json");
  EXPECT_EQ(hw.name, "my-h100");
  EXPECT_DOUBLE_EQ(hw.peak_bf16_tflops, 989);  // from the base
  EXPECT_DOUBLE_EQ(hw.intra_busbw_gbps, 370);
  EXPECT_DOUBLE_EQ(hw.inter_busbw_gbps, 25);
  EXPECT_EQ(hw.gpus_per_node, 4);
  EXPECT_EQ(hw.memory_bytes, 94'000'000'000);
  Hardware plain = parse_hardware_json(R"({"base": "b200"})", "hw.json");
  EXPECT_EQ(plain.name, "b200");
  // The compile speed-up is derived from torchtitan's Table 1 (bench/fidelity.py
  // --derive-compile); a calibration file may replace it, and the FP8 peak.
  EXPECT_DOUBLE_EQ(plain.compile_memory_speedup, kCompileMemorySpeedup);
  EXPECT_GT(kCompileMemorySpeedup, 1.0);
  Hardware cal = parse_hardware_json(
      R"({"base": "h100", "compile_memory_speedup": 1.3, "peak_fp8_tflops": 1500})", "hw.json");
  EXPECT_DOUBLE_EQ(cal.compile_memory_speedup, 1.3);
  EXPECT_DOUBLE_EQ(cal.peak_fp8_tflops, 1500);
  EXPECT_FALSE(cal.kernels.float8_linear || cal.kernels.compiled);  // per run, not per file
}

TEST(HardwareJson, FromScratch) {
  Hardware hw = parse_hardware_json(
      R"({"peak_bf16_tflops": 100, "peak_fp32_tflops": 10, "hbm_gbps": 1000,
          "memory_bytes": 16000000000, "intra_busbw_gbps": 50, "inter_busbw_gbps": 5,
          "efficiency": 0.5})",
      "hw.json");
  EXPECT_EQ(hw.name, "custom");
  EXPECT_EQ(hw.memory_bytes, 16'000'000'000);
  EXPECT_DOUBLE_EQ(hw.efficiency, 0.5);
  EXPECT_EQ(hw.gpus_per_node, 8);
}

TEST(HardwareJson, Errors) {
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "hbm_gb": 1})", "hw.json"); }),
              HasSubstr("hw.json: /hbm_gb: unknown field"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json("{\"base\": \"h100\",\n \"x\" 1}", "hw.json"); }),
              HasSubstr("hw.json: malformed JSON at line 2, column"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json("[]", "hw.json"); }),
              HasSubstr("hw.json: expected a JSON object"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "tpu"})", "hw.json"); }),
              HasSubstr("hw.json: /base: unknown preset 'tpu'"));
  // Found by the hardware_json fuzzer: a preset name with a newline must not break the message.
  EXPECT_EQ(runtime_error_of([] { parse_hardware_json(R"({"base": "tp\nu"})", "hw.json"); }),
            "hw.json: /base: unknown preset 'tp u'");
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "hbm_gbps": "fast"})", "hw.json"); }),
              HasSubstr("hw.json: /hbm_gbps: expected a non-negative number"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "hbm_gbps": -1})", "hw.json"); }),
              HasSubstr("/hbm_gbps: expected a non-negative number"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"peak_bf16_tflops": 1})", "hw.json"); }),
              HasSubstr("missing or zero"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "gpus_per_node": 0})", "hw.json"); }),
              HasSubstr("/gpus_per_node: expected a positive integer"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "gpus_per_node": 4.5})", "hw.json"); }),
              HasSubstr("/gpus_per_node: expected a positive integer"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "efficiency": 1.5})", "hw.json"); }),
              HasSubstr("/efficiency: must be in (0, 1]"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "compile_memory_speedup": 0.5})", "hw.json"); }),
              HasSubstr("hw.json: /compile_memory_speedup: must be at least 1"));
  EXPECT_THAT(runtime_error_of([] { parse_hardware_json(R"({"base": "h100", "memory_gb": 1, "memory_bytes": 1})", "hw.json"); }),
              HasSubstr("not both"));
}

TEST(HardwareJson, LoadFile) {
  namespace fs = std::filesystem;
  fs::path p = fs::temp_directory_path() / "autoshard_mesh_test_hw.json";
  {
    std::ofstream out(p);
    out << R"({"base": "a100", "inter_busbw_gbps": 12})";
  }
  Hardware hw = load_hardware_json(p.string());
  EXPECT_EQ(hw.name, "a100");
  EXPECT_DOUBLE_EQ(hw.inter_busbw_gbps, 12);
  fs::remove(p);
  EXPECT_THAT(runtime_error_of([&] { load_hardware_json(p.string()); }),
              HasSubstr("cannot open file"));
}

}  // namespace
}  // namespace autoshard
