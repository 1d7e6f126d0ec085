/// libFuzzer harness for the hardware JSON reader (src/mesh/hardware.h): no crash, one-line
/// errors, and accepted files give figures the cost model can divide by.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "mesh/hardware.h"

using namespace autoshard;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    Hardware hw = parse_hardware_json(text, "fuzz.hw.json");
    if (!(hw.peak_bf16_tflops > 0) || !(hw.hbm_gbps > 0) || !(hw.intra_busbw_gbps > 0) ||
        !(hw.inter_busbw_gbps > 0) || hw.memory_bytes <= 0 || hw.gpus_per_node < 1 ||
        !(hw.efficiency > 0 && hw.efficiency <= 1))
      fuzz::fail("accepted hardware with a non-positive figure");
    for (double v : {hw.peak_bf16_tflops, hw.peak_fp32_tflops, hw.hbm_gbps, hw.intra_busbw_gbps,
                     hw.inter_busbw_gbps, hw.intra_latency_us, hw.inter_latency_us,
                     hw.base_latency_us, hw.launch_floor_us})
      if (!std::isfinite(v)) fuzz::fail("accepted hardware with a non-finite figure");
  } catch (const std::runtime_error& e) {
    fuzz::check_message(e.what(), "fuzz.hw.json: ");
  }
  return 0;
}
