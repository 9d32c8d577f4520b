// XLA FFI handler, CPU: y = x * scale + shift over a float32 array of any shape.
//
// The signature is declared to XLA (see the binding at the bottom): one float32 buffer
// in, two float attributes named "scale" and "shift", one float32 buffer out. XLA checks
// the types and attribute names before calling; this code checks that the result has
// the operand's shape, which JAX's ffi_call sets from the caller's declaration.
#include <cstddef>
#include <cstdint>
#include <string>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// `in` and `out` are dimension spans; a mismatch names the first differing dimension.
template <typename Dims>
ffi::Error SameShape(const Dims& in, const Dims& out) {
  if (in.size() != out.size()) {
    return ffi::Error::InvalidArgument("boundary_scale_shift: result rank " +
                                       std::to_string(out.size()) + " differs from operand rank " +
                                       std::to_string(in.size()));
  }
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != out[i]) {
      return ffi::Error::InvalidArgument("boundary_scale_shift: result dimension " +
                                         std::to_string(i) + " differs from the operand's");
    }
  }
  return ffi::Error::Success();
}

ffi::Error ScaleShiftCpu(ffi::Buffer<ffi::F32> x, float scale, float shift,
                         ffi::ResultBuffer<ffi::F32> y) {
  ffi::Error shape = SameShape(x.dimensions(), y->dimensions());
  if (shape.failure()) return shape;
  const float* in = x.typed_data();
  float* out = y->typed_data();
  const size_t n = x.element_count();
  for (size_t i = 0; i < n; ++i) out[i] = in[i] * scale + shift;
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(BoundaryScaleShiftCpu, ScaleShiftCpu,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("scale")
                                  .Attr<float>("shift")
                                  .Ret<ffi::Buffer<ffi::F32>>());
