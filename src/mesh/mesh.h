#pragma once
/// An N-D device mesh: shape, dimension names and, per dimension, whether its collectives cross
/// node boundaries.  Communication figures per mesh dim are derived from the hardware.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mesh/hardware.h"

namespace autoshard {

/// Index of a mesh dimension.
using MeshDimIdx = int32_t;

enum class CommBackend : uint8_t { kNccl, kGloo };
/// "nccl" or "gloo"; else std::invalid_argument "OPTION: expected nccl or gloo, got 'S'" (the
/// CLI's --backend, the Python Mesh's backend).
CommBackend parse_backend(std::string_view s, std::string_view option);

struct MeshDim {
  std::string name;
  int64_t size = 1;
  bool inter_node = false;  ///< its collectives cross node boundaries
  double busbw_gbps = 0;    ///< bus bandwidth for collectives over this dim (GB/s)
  double latency_us = 0;    ///< per-hop latency
};

class Mesh {
 public:
  Mesh() = default;
  /// Builds a mesh; dims whose running product (walking from the last dim) exceeds the
  /// GPUs per node are inter-node, as in DTensor's MeshTopoInfo.  Throws std::invalid_argument
  /// for empty shapes, non-positive sizes, or a names list of the wrong length / duplicates.
  Mesh(std::vector<int64_t> shape, std::vector<std::string> names, const Hardware& hw,
       CommBackend backend = CommBackend::kNccl);

  /// Parses "2x8" / "2,8" / "8" (also "(2, 8)", "(16,)") into a shape.  Throws
  /// std::invalid_argument naming the bad item.
  static std::vector<int64_t> parse_shape(std::string_view s);
  /// Parses "dp,tp" (spaces around items allowed); an empty string gives no names (the mesh
  /// then uses d0, d1, ...).  Throws std::invalid_argument for empty items, characters other
  /// than letters, digits, '_' and '-', or duplicates.
  static std::vector<std::string> parse_names(std::string_view s);

  int32_t ndim() const { return static_cast<int32_t>(dims_.size()); }
  const MeshDim& dim(MeshDimIdx i) const { return dims_.at(static_cast<size_t>(i)); }
  MeshDim& dim(MeshDimIdx i) { return dims_.at(static_cast<size_t>(i)); }
  int64_t size(MeshDimIdx i) const { return dim(i).size; }
  std::vector<int64_t> shape() const;
  std::vector<std::string> names() const;
  int64_t num_devices() const;
  const Hardware& hardware() const { return hw_; }
  CommBackend backend() const { return backend_; }
  /// "2x8 (dp, tp)".
  std::string describe() const;

 private:
  std::vector<MeshDim> dims_;
  Hardware hw_;
  CommBackend backend_ = CommBackend::kNccl;
};

}  // namespace autoshard
