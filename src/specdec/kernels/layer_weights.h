// The weights of one decoder layer as the fused forward takes them: named fields,
// built once per layer from Python (LayerWeights, Projection in the bindings), so
// the per-layer entry layer() and the whole-stack decoder_stack read one struct.
//
// A projection's weight is held in the layout of the matmul that runs it; its kind
// says which, and project() (cpu_kernels.cpp) dispatches on it. A new matmul path
// (another ISA's kernel, a quantised format) is a new kind with its own tensors.

#pragma once

#include <torch/extension.h>

#include <cstdint>
#include <memory>
#include <string>

#include "quant_linear.h"

namespace specdec_kernels {

// y = x W^T (+ bias) for x [T, in] -> [T, out], in x's dtype.
struct Projection {
  enum class Kind {
    kPlain,     // weight [out, in] in the model dtype: at::linear
    kOneDnn,    // weight pre-packed by oneDNN (_reorder_linear_weight), bf16
    kAmxTiles,  // tiles [out/32, in/32, 2, 16, 32] (pack_tile_weight) up to
                // kTileLinearMaxRows rows; weight: the oneDNN copy for more rows
                // (undefined: the tiles serve every row count)
    kInt8,      // weight int8 [out, in], scales [out]: computed in the scales' dtype
    kModule,    // module: a Python callable x -> y (any module of another kind)
    kGguf,      // quant: raw GGUF blocks (Q4_0 .. Q6_K), run by quant_linear
    kBf16Invariant,  // weight bf16 [out, in] in bf16_linear.h's column groups
                     // (pack_bf16_invariant): rows independent of the batch
  };

  Kind kind = Kind::kPlain;
  at::Tensor weight;
  c10::optional<at::Tensor> bias;  // [out]
  at::Tensor scales;               // kInt8
  at::Tensor tiles;                // kAmxTiles
  py::object module;               // kModule
  std::shared_ptr<const QuantWeight> quant;  // kGguf (its bias a float32 copy of bias)

  const char* kind_name() const {
    switch (kind) {
      case Kind::kPlain: return "plain";
      case Kind::kOneDnn: return "onednn";
      case Kind::kAmxTiles: return "amx_tiles";
      case Kind::kInt8: return "int8";
      case Kind::kModule: return "module";
      case Kind::kGguf: return "gguf";
      case Kind::kBf16Invariant: return "bf16_invariant";
    }
    return "?";
  }
};

// One decoder layer: h += attention(norm(h)); h += mlp(norm(h)).
struct LayerWeights {
  at::Tensor input_norm;  // [hidden] RMSNorm weight before attention
  Projection qkv;         // hidden -> (Hq + 2 Hkv) * D, q | k | v
  Projection o_proj;      // Hq * D -> hidden
  at::Tensor post_norm;   // [hidden] RMSNorm weight before the MLP
  Projection gate_up;     // hidden -> 2 * intermediate, gate | up
  Projection down;        // intermediate -> hidden
  int64_t num_heads = 0;  // query heads Hq (KV heads and D come from the cache)
  double eps = 1e-6;      // the RMSNorm epsilon
};

}  // namespace specdec_kernels
