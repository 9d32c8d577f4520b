// `matmul`: C[m, n] = A[m, k] · B[k, n], row-major, accumulated in float32.
//
// Two kernels for the same product, so a reader can see what tiling buys:
//   matmul_naive_*  one thread per output element, every operand read from global memory
//                   (k loads of A and k of B per output; the caches do what they can).
//   matmul_tiled_*  a block computes a TILE × TILE patch of C, staging TILE × TILE tiles
//                   of A and B through shared memory so each global load is reused TILE
//                   times; each thread keeps ROWS_PER_THREAD partial sums in registers.
// Both check every index against m, n and k, so any shape the catalog allows is safe
// (edges are padded with zeros in shared memory, never read past the end).
#include "common.cuh"

namespace {

constexpr int NAIVE_BLOCK = 16;     // launch: block (16, 16), grid (⌈n/16⌉, ⌈m/16⌉)
constexpr int TILE = 32;            // launch: block (32, 8),  grid (⌈n/32⌉, ⌈m/32⌉)
constexpr int ROWS_PER_THREAD = 4;  // TILE / blockDim.y
constexpr int TILED_THREADS = TILE * (TILE / ROWS_PER_THREAD);

template <typename T>
__device__ __forceinline__ void naive(const T* __restrict__ a, const T* __restrict__ b,
                                      T* __restrict__ c, int m, int n, int k) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= m || col >= n) return;
  const T* a_row = a + static_cast<size_t>(row) * k;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) {
    acc += boundary::load(a_row[p]) * boundary::load(b[static_cast<size_t>(p) * n + col]);
  }
  c[static_cast<size_t>(row) * n + col] = boundary::store<T>(acc);
}

template <typename T>
__device__ __forceinline__ void tiled(const T* __restrict__ a, const T* __restrict__ b,
                                      T* __restrict__ c, int m, int n, int k) {
  // Tiles are kept in float32: narrow inputs are widened once, when they are staged.
  __shared__ float a_tile[TILE][TILE];
  __shared__ float b_tile[TILE][TILE];
  const int tx = threadIdx.x;  // 0 .. TILE-1: the column inside the patch
  const int ty = threadIdx.y;  // 0 .. TILE/ROWS_PER_THREAD-1: the first of this thread's rows
  const int step = TILE / ROWS_PER_THREAD;
  const int row0 = blockIdx.y * TILE;
  const int col = blockIdx.x * TILE + tx;
  float acc[ROWS_PER_THREAD] = {};

  for (int base = 0; base < k; base += TILE) {
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
      const int r = ty + i * step;
      const int a_row = row0 + r;
      const int a_col = base + tx;
      a_tile[r][tx] = (a_row < m && a_col < k)
                          ? boundary::load(a[static_cast<size_t>(a_row) * k + a_col])
                          : 0.0f;
      const int b_row = base + r;
      b_tile[r][tx] = (b_row < k && col < n)
                          ? boundary::load(b[static_cast<size_t>(b_row) * n + col])
                          : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int p = 0; p < TILE; ++p) {
      // A warp shares ty, so a_tile reads are broadcasts and b_tile reads hit 32 banks.
      const float b_value = b_tile[p][tx];
#pragma unroll
      for (int i = 0; i < ROWS_PER_THREAD; ++i) acc[i] += a_tile[ty + i * step][p] * b_value;
    }
    __syncthreads();
  }

  if (col >= n) return;
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
    const int row = row0 + ty + i * step;
    if (row < m) c[static_cast<size_t>(row) * n + col] = boundary::store<T>(acc[i]);
  }
}

}  // namespace

#define BOUNDARY_MATMUL(SUFFIX, T)                                                          \
  extern "C" __global__ void __launch_bounds__(NAIVE_BLOCK* NAIVE_BLOCK)                   \
      matmul_naive_##SUFFIX(const T* a, const T* b, T* c, int m, int n, int k) {           \
    naive<T>(a, b, c, m, n, k);                                                             \
  }                                                                                         \
  extern "C" __global__ void __launch_bounds__(TILED_THREADS)                               \
      matmul_tiled_##SUFFIX(const T* a, const T* b, T* c, int m, int n, int k) {           \
    tiled<T>(a, b, c, m, n, k);                                                             \
  }

BOUNDARY_MATMUL(f32, float)
BOUNDARY_MATMUL(bf16, boundary::bf16)
BOUNDARY_MATMUL(f16, boundary::f16)
