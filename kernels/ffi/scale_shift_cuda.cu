// XLA FFI handler, CUDA: y = x * scale + shift over a float32 array of any shape.
//
// Same declared signature as the CPU handler, plus the stream XLA runs the program on
// (PlatformStream<cudaStream_t>): the kernel is launched on that stream, so it is
// ordered with the rest of the XLA program and needs no synchronization of its own.
// A launch error is returned to XLA, which raises it in Python.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int kThreads = 256;
constexpr long long kMaxBlocks = 1 << 16;  // a grid-stride loop covers the rest

__global__ void scale_shift_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   long long n, float scale, float shift) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = x[i] * scale + shift;
  }
}

ffi::Error ScaleShiftCuda(cudaStream_t stream, ffi::Buffer<ffi::F32> x, float scale,
                          float shift, ffi::ResultBuffer<ffi::F32> y) {
  auto in = x.dimensions();
  auto out = y->dimensions();
  if (in.size() != out.size()) {
    return ffi::Error::InvalidArgument("boundary_scale_shift: result rank differs");
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != out[i]) {
      return ffi::Error::InvalidArgument("boundary_scale_shift: result dimension " +
                                         std::to_string(i) + " differs from the operand's");
    }
  }
  const long long n = static_cast<long long>(x.element_count());
  if (n == 0) return ffi::Error::Success();
  long long blocks = (n + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  scale_shift_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      x.typed_data(), y->typed_data(), n, scale, shift);
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    return ffi::Error::Internal(std::string("boundary_scale_shift: launch failed: ") +
                                cudaGetErrorString(launched));
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(BoundaryScaleShiftCuda, ScaleShiftCuda,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<cudaStream_t>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale")
                                  .Attr<float>("shift")
                                  .Ret<ffi::Buffer<ffi::F32>>());
