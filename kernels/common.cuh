// Helpers shared by Boundary's CUDA kernels: storage-type conversion and reductions.
//
// Every kernel reads its storage type (float, bfloat16 or half), computes in float32
// and rounds once when it stores, so the narrow types lose no more than the JAX path
// does. Kernels are exported with C linkage (no name mangling) so that the names in
// PTX, SASS and the ptxas resource report are the names the launcher asks for.
#pragma once

// No CUDA headers: the kernels build the same with nvcc and with NVRTC, which finds no
// toolkit headers on a machine that has only the Python wheels. The two 16-bit storage
// types are therefore plain bit containers converted by hand (bfloat16) or by the PTX
// conversion instruction (half).

namespace boundary {

struct alignas(2) bf16 {
  unsigned short bits;
};

struct alignas(2) f16 {
  unsigned short bits;
};

__device__ __forceinline__ float negative_infinity() { return -__int_as_float(0x7f800000); }

__device__ __forceinline__ float load(float v) { return v; }

__device__ __forceinline__ float load(bf16 v) {
  // bfloat16 is the top half of a float32: widening is exact.
  return __uint_as_float(static_cast<unsigned int>(v.bits) << 16);
}

__device__ __forceinline__ float load(f16 v) {
  float out;
  asm("cvt.f32.f16 %0, %1;" : "=f"(out) : "h"(v.bits));
  return out;
}

template <typename T>
__device__ __forceinline__ T store(float v);

template <>
__device__ __forceinline__ float store<float>(float v) {
  return v;
}

template <>
__device__ __forceinline__ bf16 store<bf16>(float v) {
  // Round to nearest, ties to even, on the 16 bits that are dropped; NaN stays NaN.
  unsigned int u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{0x7fc0};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<unsigned short>(u >> 16)};
}

template <>
__device__ __forceinline__ f16 store<f16>(float v) {
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(v));
  return f16{bits};
}

constexpr unsigned FULL_WARP = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(FULL_WARP, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_WARP, v, offset));
  return v;
}

// Combine one value per thread of a one-dimensional block into a value every thread
// sees. `scratch` holds one slot per warp; the barrier at the end lets the caller
// reuse it for the next reduction.
template <bool IS_MAX>
__device__ float block_combine(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  v = IS_MAX ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = IS_MAX ? negative_infinity() : 0.0f;
  for (int w = 0; w < warps; ++w) total = IS_MAX ? fmaxf(total, scratch[w]) : total + scratch[w];
  __syncthreads();
  return total;
}

}  // namespace boundary
