"""The HLO summary: fusions, library calls, collectives, copies and transposes."""

from __future__ import annotations

from workers.protocol.hlo import shape_bytes
from workers.protocol.hlo_summary import library_of, summarize_hlo

GPU_HLO = """\
HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[256,256]{1,0})->f32[256,256]{1,0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}

%gemm_body (p0: bf16[256,256], p1: bf16[256,256]) -> bf16[256,256] {
  %p0 = bf16[256,256]{1,0} parameter(0)
  %p1 = bf16[256,256]{1,0} parameter(1)
  ROOT %dot = bf16[256,256]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_exp (param_0: f32[256,256]) -> f32[256,256] {
  %param_0 = f32[256,256]{1,0} parameter(0)
  %t = f32[256,256]{0,1} transpose(%param_0), dimensions={1,0}
  ROOT %e = f32[256,256]{1,0} exponential(%t)
}

ENTRY %main (a: f32[256,256]) -> f32[256,256] {
  %a = f32[256,256]{1,0} parameter(0)
  %cublas-gemm.1 = (f32[256,256]{1,0}, s8[4194304]{0}) custom-call(f32[256,256]{1,0} %a, f32[256,256]{1,0} %a), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"alpha_real":1}}
  %gte = f32[256,256]{1,0} get-tuple-element((f32[256,256]{1,0}, s8[4194304]{0}) %cublas-gemm.1), index=0
  %cv = bf16[256,256]{1,0} convert(%gte)
  %gemm_fusion = bf16[256,256]{1,0} fusion(%cv, %cv), kind=kCustom, calls=%gemm_body, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","triton_gemm_config":{"block_m":"64"}}}
  %back = f32[256,256]{1,0} convert(%gemm_fusion)
  %ar = f32[256,256]{1,0} all-reduce-start(%back), channel_id=1, replica_groups={{0,1},{2,3}}, to_apply=%add
  %ard = f32[256,256]{1,0} all-reduce-done(%ar)
  %c = f32[256,256]{1,0} copy(%ard)
  ROOT %f = f32[256,256]{1,0} fusion(%c), kind=kLoop, calls=%fused_exp
}
"""  # noqa: E501


def test_gpu_style_hlo_names_libraries_and_collectives() -> None:
    summary = summarize_hlo(GPU_HLO)
    assert [c.target for c in summary.custom_calls] == ["__cublas$gemm"]
    assert summary.custom_calls[0].library == "cuBLAS"
    kinds = {f.name: (f.kind, f.backend_kind, f.library, f.ops) for f in summary.fusions}
    assert kinds["gemm_fusion"] == ("kCustom", "__triton_gemm", "Triton", ["dot"])
    assert kinds["f"] == ("kLoop", None, None, ["transpose", "exponential"])
    assert summary.libraries == ["Triton", "cuBLAS"]
    (collective,) = summary.collectives
    assert collective.kind == "all-reduce"
    assert collective.bytes == 256 * 256 * 4
    assert collective.replica_groups == "{{0,1},{2,3}}"
    assert summary.copies == 1
    assert summary.transposes == 1
    # Only the entry computation is top level: fusion bodies and reducers are not.
    assert summary.instructions == 10
    assert summary.op_counts["convert"] == 2
    assert "dot" not in summary.op_counts


def test_libraries_and_shapes() -> None:
    assert library_of("__cublas$lt$matmul") == "cuBLASLt"
    assert library_of("__cudnn$fmhaSoftmax") == "cuDNN"
    assert library_of("__ynn_fusion") == "YNNPACK"
    assert library_of("__onednn$matmul") == "oneDNN"
    assert library_of("tpu_custom_call") == "Mosaic TPU"
    assert library_of("my_handler") is None
    assert shape_bytes("(f32[2,3]{1,0}, bf16[4]{0})") == 24 + 8
    assert shape_bytes("pred[]") == 1
    assert shape_bytes("token[]") is None


def test_empty_text_gives_an_empty_summary() -> None:
    summary = summarize_hlo("")
    assert summary.instructions == 0 and summary.fusions == [] and summary.libraries == []
