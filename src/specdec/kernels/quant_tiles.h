// GGUF Q8_0 projections on AMX-INT8 tiles, for full tiles of kQuantTile x rows:
// group_tile's result bit for bit. Part of quant_linear.h, which includes it after its
// lane primitives.
//
// group_tile spends most of its instructions on the integer dots: 8 dpbusd per x row
// and 32-block. One tile product (TDPBSUD: signed x bytes times unsigned weight bytes,
// exact int32 sums) does a block's dots for kQuantTile rows x 16 outputs. The float work
// after it is group_tile's, operation for operation and in the same order: per block
// acc = fma(float(int sum - 128 sum(x)), d * dx, acc), so a row's output does not
// depend on which path ran it (batch invariance holds across them). A Q8_0 record's
// step vectors (16 outputs x 4 inputs, 64 bytes) are the weight tile's rows as they
// are. Up to kTilesInFlight row tiles share each block's weight tile, and block b + 1's
// products run while block b's sums are scaled (a small tile product costs its
// latency more than its work). Measured on a Xeon with AMX (2 cores): SmolLM2's Q8_0
// LM head (576 -> 49152) at 64 rows 4.5 ms against 9.6 ms (VNNI), at 512 rows 32 against
// 55 ms. The 4-bit formats gain nothing this way (their nibbles must be unpacked into
// a tile's bytes and their mins add a second scaled sum per block): they keep VNNI.
#pragma once

#if defined(SPECDEC_HAS_AMX) && defined(__AMX_INT8__)
#define SPECDEC_HAS_AMX_INT8 1

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "attention_amx.h"

namespace specdec_kernels {
namespace quant {

static_assert(kLanes == 16 && kQuantTile <= 16, "AMX builds are AVX-512 builds");

constexpr bool tiles_run(GgufFormat f) { return f == GgufFormat::kQ8_0; }

constexpr int kTilesInFlight = 4;  // row tiles sharing a block's weight tile (tiles 0-3)

// Tiles 0-3: int32 sums [kQuantTile x 16], one per row tile; 4-6: x [kQuantTile x 32
// bytes]; 7: a block's weights [8 x 64 bytes] (32 inputs x 16 outputs).
inline void configure_int8_tiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = t < 7 ? kQuantTile : 8;
    cfg.colsb[t] = t >= 4 && t < 7 ? 32 : 64;
  }
  _tile_loadconfig(&cfg);
}

// One block's products for n row tiles (x rows a, a + tile, ...): the tile intrinsics
// take their tile numbers as literals, hence the unrolled form.
inline void issue_block(const uint8_t* w, const int8_t* a, int64_t tile_stride, int n) {
#define SPECDEC_DP(c, x) \
  if constexpr (!kVnni) _tile_dpbssd(c, x, 7); /* records hold q itself, signed */ \
  else _tile_dpbsud(c, x, 7)
  _tile_loadd(7, w, kStep);
  _tile_zero(0);
  _tile_loadd(4, a, 32);
  SPECDEC_DP(0, 4);
  if (n > 1) {
    _tile_zero(1);
    _tile_loadd(5, a + tile_stride, 32);
    SPECDEC_DP(1, 5);
  }
  if (n > 2) {
    _tile_zero(2);
    _tile_loadd(6, a + 2 * tile_stride, 32);
    SPECDEC_DP(2, 6);
  }
  if (n > 3) {
    _tile_zero(3);
    _tile_loadd(4, a + 3 * tile_stride, 32);
    SPECDEC_DP(3, 4);
  }
#undef SPECDEC_DP
}

inline void store_sums(int32_t* sums, int n) {
  _tile_stored(0, sums, 64);
  if (n > 1) _tile_stored(1, sums + kQuantTile * 16, 64);
  if (n > 2) _tile_stored(2, sums + 2 * kQuantTile * 16, 64);
  if (n > 3) _tile_stored(3, sums + 3 * kQuantTile * 16, 64);
}

// out [n kQuantTile][kLanes] = group_tile<kQ8_0, kQuantTile>'s for the group at g
// (records) and n full row tiles from t0. The tiles must be configured.
inline void group_tiles_q8_0(const uint8_t* g, int64_t blocks, const QuantizedRows& x,
                             int64_t t0, int n, float* out, const uint8_t* next) {
  constexpr GgufFormat F = GgufFormat::kQ8_0;
  constexpr int64_t G = kLanes, R = kQuantTile;
  constexpr int64_t kRows = kTilesInFlight * R;
  const int64_t rec = record_bytes(F);
  alignas(64) float acc[kRows * G];
  alignas(64) int32_t sums[2][kRows * 16];
  const int64_t rows = n * R;
  std::fill(acc, acc + rows * G, 0.f);
  auto weights = [&](int64_t b) { return g + b * rec + 2 * G; };
  // Row tile i of block b sits at x.at(t0 + i R, 0, b): R * blocks index steps apart.
  const int64_t tile_stride = R * blocks * 32;
  auto x_rows = [&](int64_t b) { return x.q.data() + x.at(t0, 0, b) * 32; };
  // group_tile's offset: under VNNI the records hold u = q + 128, w = d (u - 128).
  constexpr int32_t kOffset = kVnni ? -128 : 0;
  // Block b's sums are scaled one block after their store, not straight after it: a
  // load right behind a tile store waits for the store to reach the cache.
  auto scale = [&](int64_t b, const int32_t* s) {
    const uint8_t* p = g + b * rec;
    if (next) prefetch_record(next + b * rec, rec);
    const VF sc = ld_half(p);
    for (int i = 0; i < n; ++i) {
      const int64_t i0 = x.at(t0 + i * R, 0, b);
      SPECDEC_UNROLL
      for (int r = 0; r < R; ++r) {
        const int64_t row = i * R + r;
        VA ia = _mm512_load_si512(s + row * 16);
        if constexpr (kOffset != 0) ia = _mm512_add_epi32(ia, iset1(kOffset * x.s32[i0 + r]));
        vstore(acc + row * G, vfma(cvt(ia), vmul(sc, vset1(x.d[i0 + r])), _mm512_load_ps(acc + row * G)));
      }
    }
  };
  issue_block(weights(0), x_rows(0), tile_stride, n);
  for (int64_t b = 0; b < blocks; ++b) {
    store_sums(sums[b % 2], n);
    if (b + 1 < blocks) issue_block(weights(b + 1), x_rows(b + 1), tile_stride, n);
    if (b > 0) scale(b - 1, sums[(b - 1) % 2]);
  }
  scale(blocks - 1, sums[(blocks - 1) % 2]);
  std::copy(acc, acc + rows * G, out);
}

}  // namespace quant
}  // namespace specdec_kernels

#endif
