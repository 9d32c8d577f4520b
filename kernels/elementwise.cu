// `elementwise`: the same chain of `ops` cheap operations as the JAX workload,
// repeating sin, affine (0.75·v + 0.125), tanh, cos.
//
//   chain_fused_*  one kernel for the whole chain: each element is read once, pushed
//                  through every operation in registers and written once — what XLA's
//                  fusion produces, written by hand.
//   chain_step_*   one operation per launch, `ops` launches in a row (the first reads x,
//                  the rest work in place on y): the unfused program, whose memory
//                  traffic grows with the chain. Intermediates are rounded to the
//                  storage type, as separate unfused operations would be.
// Both walk the vector with a grid-stride loop, so any n the catalog allows is covered
// by a bounded grid.
#include "common.cuh"

namespace {

__device__ __forceinline__ float apply_op(float v, int index) {
  switch (index & 3) {
    case 0:
      return sinf(v);
    case 1:
      return v * 0.75f + 0.125f;
    case 2:
      return tanhf(v);
    default:
      return cosf(v);
  }
}

template <typename T>
__device__ __forceinline__ void fused(const T* __restrict__ x, T* __restrict__ y, long long n,
                                      int ops) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float v = boundary::load(x[i]);
    for (int op = 0; op < ops; ++op) v = apply_op(v, op);
    y[i] = boundary::store<T>(v);
  }
}

template <typename T>
__device__ __forceinline__ void step(const T* x, T* y, long long n, int op) {
  // No __restrict__: after the first launch x and y are the same buffer.
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = boundary::store<T>(apply_op(boundary::load(x[i]), op));
  }
}

}  // namespace

#define BOUNDARY_ELEMENTWISE(SUFFIX, T)                                                     \
  extern "C" __global__ void chain_fused_##SUFFIX(const T* x, T* y, long long n, int ops) { \
    fused<T>(x, y, n, ops);                                                                 \
  }                                                                                         \
  extern "C" __global__ void chain_step_##SUFFIX(const T* x, T* y, long long n, int op) {   \
    step<T>(x, y, n, op);                                                                   \
  }

BOUNDARY_ELEMENTWISE(f32, float)
BOUNDARY_ELEMENTWISE(bf16, boundary::bf16)
BOUNDARY_ELEMENTWISE(f16, boundary::f16)
