// `reduction`: a sum or a softmax along one axis of a rows × cols row-major matrix,
// accumulated in float32 whatever the storage type.
//
// axis 1 reduces along a row (contiguous memory); axis 0 along a column (strided).
//   *_naive_*  one thread per output vector, walking the whole axis alone. Along rows
//              (axis 1) neighbouring threads read addresses `cols` apart: uncoalesced.
//   *_tree_*   threads cooperate on each output vector and combine partial results:
//              axis 1: one block of TREE_THREADS per row, combined with warp shuffles;
//              axis 0: a block of 32 × 8 threads per 32 columns, the 8 rows of threads
//              each walking every 8th row (coalesced), combined in shared memory.
// Softmax makes three passes over the axis: the maximum, the sum of exp(x − max),
// then the normalized values. Every index is checked against rows and cols.
#include "common.cuh"

namespace {

constexpr int TREE_THREADS = 256;  // axis 1 tree: block (256), grid (rows)
constexpr int COLUMN_GROUP = 32;   // axis 0 tree: block (32, 8), grid (⌈cols/32⌉)
constexpr int COLUMN_SPLIT = 8;
constexpr int NAIVE_THREADS = 256;  // naive: block (256), grid (⌈outputs/256⌉)

// --- naive: one thread per output vector -------------------------------------------------

template <typename T, bool SOFTMAX>
__device__ __forceinline__ void naive(const T* __restrict__ x, T* __restrict__ y, int rows,
                                      int cols, int axis) {
  const int outer = blockIdx.x * blockDim.x + threadIdx.x;
  const int vectors = axis == 1 ? rows : cols;
  if (outer >= vectors) return;
  const int length = axis == 1 ? cols : rows;
  // Element j of vector `outer` lives at base + j * stride.
  const size_t base = axis == 1 ? static_cast<size_t>(outer) * cols : static_cast<size_t>(outer);
  const size_t stride = axis == 1 ? 1 : static_cast<size_t>(cols);
  if (!SOFTMAX) {
    float total = 0.0f;
    for (int j = 0; j < length; ++j) total += boundary::load(x[base + j * stride]);
    y[outer] = boundary::store<T>(total);
    return;
  }
  float peak = boundary::negative_infinity();
  for (int j = 0; j < length; ++j) peak = fmaxf(peak, boundary::load(x[base + j * stride]));
  float total = 0.0f;
  for (int j = 0; j < length; ++j) total += expf(boundary::load(x[base + j * stride]) - peak);
  const float inverse = 1.0f / total;
  for (int j = 0; j < length; ++j) {
    y[base + j * stride] = boundary::store<T>(expf(boundary::load(x[base + j * stride]) - peak) * inverse);
  }
}

// --- tree, axis 1: a block per row --------------------------------------------------------

template <typename T, bool SOFTMAX>
__device__ __forceinline__ void tree_rows(const T* __restrict__ x, T* __restrict__ y, int rows,
                                          int cols) {
  __shared__ float scratch[TREE_THREADS / 32];
  const int row = blockIdx.x;
  if (row >= rows) return;  // whole block leaves together: no barrier is skipped by some
  const T* in = x + static_cast<size_t>(row) * cols;
  if (!SOFTMAX) {
    float partial = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) partial += boundary::load(in[j]);
    const float total = boundary::block_combine<false>(partial, scratch);
    if (threadIdx.x == 0) y[row] = boundary::store<T>(total);
    return;
  }
  float peak = boundary::negative_infinity();
  for (int j = threadIdx.x; j < cols; j += blockDim.x) peak = fmaxf(peak, boundary::load(in[j]));
  peak = boundary::block_combine<true>(peak, scratch);
  float partial = 0.0f;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) partial += expf(boundary::load(in[j]) - peak);
  const float inverse = 1.0f / boundary::block_combine<false>(partial, scratch);
  T* out = y + static_cast<size_t>(row) * cols;
  for (int j = threadIdx.x; j < cols; j += blockDim.x) {
    out[j] = boundary::store<T>(expf(boundary::load(in[j]) - peak) * inverse);
  }
}

// --- tree, axis 0: a block per 32 columns ------------------------------------------------

template <bool IS_MAX>
__device__ __forceinline__ float column_combine(float v, float (*scratch)[COLUMN_GROUP + 1]) {
  // Every thread of a column ends with the combined value; the trailing barrier lets
  // the caller reuse `scratch`.
  scratch[threadIdx.y][threadIdx.x] = v;
  __syncthreads();
  float total = IS_MAX ? boundary::negative_infinity() : 0.0f;
  for (int s = 0; s < COLUMN_SPLIT; ++s) {
    const float part = scratch[s][threadIdx.x];
    total = IS_MAX ? fmaxf(total, part) : total + part;
  }
  __syncthreads();
  return total;
}

template <typename T, bool SOFTMAX>
__device__ __forceinline__ void tree_columns(const T* __restrict__ x, T* __restrict__ y,
                                             int rows, int cols) {
  __shared__ float scratch[COLUMN_SPLIT][COLUMN_GROUP + 1];
  const int col = blockIdx.x * COLUMN_GROUP + threadIdx.x;
  const bool active = col < cols;  // inactive threads still reach every barrier
  if (!SOFTMAX) {
    float partial = 0.0f;
    for (int r = threadIdx.y; active && r < rows; r += COLUMN_SPLIT) {
      partial += boundary::load(x[static_cast<size_t>(r) * cols + col]);
    }
    const float total = column_combine<false>(partial, scratch);
    if (active && threadIdx.y == 0) y[col] = boundary::store<T>(total);
    return;
  }
  float peak = boundary::negative_infinity();
  for (int r = threadIdx.y; active && r < rows; r += COLUMN_SPLIT) {
    peak = fmaxf(peak, boundary::load(x[static_cast<size_t>(r) * cols + col]));
  }
  peak = column_combine<true>(peak, scratch);
  float partial = 0.0f;
  for (int r = threadIdx.y; active && r < rows; r += COLUMN_SPLIT) {
    partial += expf(boundary::load(x[static_cast<size_t>(r) * cols + col]) - peak);
  }
  const float inverse = 1.0f / column_combine<false>(partial, scratch);
  for (int r = threadIdx.y; active && r < rows; r += COLUMN_SPLIT) {
    const size_t at = static_cast<size_t>(r) * cols + col;
    y[at] = boundary::store<T>(expf(boundary::load(x[at]) - peak) * inverse);
  }
}

}  // namespace

#define BOUNDARY_REDUCTION(OP, SOFTMAX, SUFFIX, T)                                             \
  extern "C" __global__ void __launch_bounds__(NAIVE_THREADS)                                  \
      OP##_naive_##SUFFIX(const T* x, T* y, int rows, int cols, int axis) {                    \
    naive<T, SOFTMAX>(x, y, rows, cols, axis);                                                 \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(TREE_THREADS)                                   \
      OP##_tree_axis1_##SUFFIX(const T* x, T* y, int rows, int cols) {                         \
    tree_rows<T, SOFTMAX>(x, y, rows, cols);                                                   \
  }                                                                                            \
  extern "C" __global__ void __launch_bounds__(COLUMN_GROUP* COLUMN_SPLIT)                     \
      OP##_tree_axis0_##SUFFIX(const T* x, T* y, int rows, int cols) {                         \
    tree_columns<T, SOFTMAX>(x, y, rows, cols);                                                \
  }

BOUNDARY_REDUCTION(sum, false, f32, float)
BOUNDARY_REDUCTION(sum, false, bf16, boundary::bf16)
BOUNDARY_REDUCTION(sum, false, f16, boundary::f16)
BOUNDARY_REDUCTION(softmax, true, f32, float)
BOUNDARY_REDUCTION(softmax, true, bf16, boundary::bf16)
BOUNDARY_REDUCTION(softmax, true, f16, boundary::f16)
