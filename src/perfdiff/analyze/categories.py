"""Op categories: what kind of work each kernel or operator is, by its name, and the table of
GPU time per category in both runs (docs/STATISTICS.md, "Op categories").

Two runs on GPUs of different vendors (or of different generations, or libraries) name the
same work differently: cuBLAS's `sm90_xmma_gemm_…` is hipBLASLt's `Cijk_…`, FlashAttention's
`flash_fwd_kernel` is ROCm's `attn_fwd`.  Row by row nothing matches; by category the time
can be compared.  `RULES` is an ordered table, the first match wins: the rules that must see a
name before a broader one would (NCCL's `AllReduce` is no reduction, a FlashAttention kernel's
CUTLASS template arguments are no GEMM, cuDNN's implicit-GEMM convolutions are convolutions)
come first.  Memcpys and memsets are categorised by their kind, never by name.

The launching operator (a kernel's `aten::mm`) is not used: the importers keep no link from a
kernel to its operator (Kineto's `External id`), so a kernel is classified by its own name;
operator names (`aten::mm`, `aten::scaled_dot_product_attention`) are classified by the same
table.  Pure: no I/O.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from perfdiff.analyze.records import CategoryRow, FunctionStats, OpCategory, unmatched_gpu_share
from perfdiff.model.cuda_names import COLLECTIVE_KERNEL
from perfdiff.model.schema import GPU_KINDS, Kind

C = OpCategory
__all__ = ["RULES", "CategoryRule", "category_table", "classify", "unmatched_gpu_share"]


@dataclass(frozen=True)
class CategoryRule:
    """One rule: the category a name matching `pattern` (re.search) is in, and examples of
    names it is there for (docs/STATISTICS.md lists them; the tests classify them)."""

    category: OpCategory
    pattern: re.Pattern[str]
    examples: tuple[str, ...]


def _rule(category: OpCategory, pattern: str, *examples: str, flags: int = re.I) -> CategoryRule:
    return CategoryRule(category, re.compile(pattern, flags), examples)


# The rules in order: the first whose pattern a name matches gives its category.
RULES: tuple[CategoryRule, ...] = (
    # Collectives first: NCCL's and RCCL's kernels carry "Reduce", "Sum" in their names.
    # The collective kernels by the one rule every stage shares (COLLECTIVE_KERNEL), then the
    # libraries' host calls and operators.
    _rule(C.COMMUNICATION, COLLECTIVE_KERNEL + r"|^(?:void )?(?:nccl|rccl)|\bnccl:|c10d::|cross_device_reduce"
          r"|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
          "ncclKernel_AllReduce_RING_LL_Sum_float", "ncclDevKernel_AllGather_RING_LL", "rcclKernel_AllReduce",
          "mscclKernel_Sum_bf16_LL128", "nccl:all_reduce", "c10d::allreduce_", "cross_device_reduce_1stage"),
    # Attention before GEMM: FlashAttention's kernels carry CUTLASS template arguments.
    _rule(C.ATTENTION, r"flash|fmha|(?<![a-z])sage|paged_?attention|attention|attn|sdpa|(?<![a-z])mha|xformers",
          "void pytorch_flash::flash_fwd_kernel<…>", "fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attn_fwd",
          "paged_attention_v2_kernel", "sageattn_qk_int8_pv_fp16", "aten::scaled_dot_product_attention",
          "aten::_flash_attention_forward", "triton_tem_fused__scaled_dot_product_flash_attention_0"),
    # Convolutions before GEMM: cuDNN's and MIOpen's are implicit GEMMs.
    _rule(C.CONVOLUTION, r"conv(?!ert)|fprop|dgrad|wgrad|winograd|igemm_(?:fwd|bwd|wrw)|MIOpen(?!.*(?:Norm|Pool))",
          "sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc", "implicit_convolve_sgemm",
          "cudnn::detail::implicit_convolve_sgemm", "igemm_fwd_gtcx_nhwc_fp16", "naive_conv_fwd_nchw",
          "MIOpenConvUni", "aten::convolution", "aten::cudnn_convolution", "triton_tem_fused_convolution_0"),
    # Triton's matmul templates and torch.compile's extern mm kernels.
    _rule(C.GEMM, r"^triton_\w*?_fused\w*?_(?:add|b|baddb)?mm(?:_|$)|^triton_tem_",
          "triton_tem_fused_addmm_0", "triton_tem_fused_mm_1"),
    _rule(C.GEMM, r"gemm|gemv|xmma|cublas|cutlass|Cijk_|rocblas|hipblas|tensile|nvjet|wgmma|matmul"
          r"|splitKreduce|^aten::(?:add|b|baddb|_scaled_)?mm$|^aten::(?:linear|addmv|mv|_addmm_activation)$",
          "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_…_cublas",
          "ampere_sgemm_128x64_tn", "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_…>",
          "cublasLt::splitKreduce_kernel", "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_…",
          "rocblas_gemm_kernel", "nvjet_tst_128x64_64x8_1x1_v_bz_TNT", "aten::mm", "aten::addmm", "aten::linear"),
    _rule(C.NORMALIZATION, r"(?:layer|rms|batch|group|instance|weight)_?norm|bn_(?:fw|bw)|welford",
          "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<…>", "rms_norm_kernel",
          "fused_add_rms_norm_kernel", "batch_norm_collect_statistics_kernel", "MIOpenBatchNormFwdTrainSpatial",
          "triton_per_fused_native_layer_norm_0", "aten::layer_norm", "aten::rms_norm"),
    _rule(C.REDUCTION, r"softmax|reduce|reduction|argmax|argmin|topk|^triton_(?:red|per)_|^aten::(?:sum|mean|max|min"
          r"|amax|amin|norm|var|std|prod|any|all|logsumexp|cumsum)$",
          "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<…>>", "cunn_SoftMaxForward",
          "softmax_warp_forward", "triton_red_fused_sum_0", "triton_per_fused__softmax_0", "aten::softmax",
          "aten::sum"),
    _rule(C.ELEMENTWISE, r"elementwise|^triton_poi_|gelu|relu|silu|swiglu|sigmoid|tanh|act_and_mul|copy|fill"
          r"|index|gather|scatter|embedding|CatArray|cat_|arange"
          r"|^aten::(?:add|sub|rsub|mul|div|neg|pow|rsqrt|sqrt|exp|log|where|clamp|masked_fill|copy|to|_to_copy|cat"
          r"|index_select|embedding|fill|zero|ones_like|zeros_like)_?$",
          "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<…>>",
          "void at::native::unrolled_elementwise_kernel<…direct_copy_kernel_cuda…>", "silu_and_mul_kernel",
          "void at::native::(anonymous namespace)::indexSelectLargeIndex<…>",
          "void at::native::(anonymous namespace)::CatArrayBatchedCopy<…>", "triton_poi_fused_add_mul_0",
          "aten::add", "aten::gelu"),
)
BY_KIND = {Kind.MEMCPY.value: C.MEMCPY, Kind.MEMSET.value: C.MEMCPY}


def classify(name: str, kind: str = Kind.KERNEL.value) -> OpCategory:
    """The category of a kernel, memcpy, memset or operator: memcpys and memsets by their kind,
    anything else by the first rule of RULES its name matches, OTHER when none does."""
    by_kind = BY_KIND.get(str(kind))
    if by_kind is not None:
        return by_kind
    for r in RULES:
        if r.pattern.search(name):
            return r.category
    return C.OTHER


def category_table(functions: Iterable[FunctionStats]) -> tuple[CategoryRow, ...]:
    """GPU time per category (every GPU's kernels, memcpys and memsets together), both runs, in
    OpCategory's order; categories absent from both runs are left out."""
    t = {c: [0.0, 0.0, 0.0, 0.0, 0, 0] for c in OpCategory}  # t_n, t_a, calls_n, calls_a, functions_n, functions_a
    for f in functions:
        if f.kind not in GPU_KINDS:
            continue
        row = t[classify(f.name, f.kind)]
        row[0] += f.t_n_us
        row[1] += f.t_a_us
        row[2] += f.calls_n
        row[3] += f.calls_a
        row[4] += int(f.presence != "new")
        row[5] += int(f.presence != "vanished")
    total_n = sum(r[0] for r in t.values())
    total_a = sum(r[1] for r in t.values())
    out = []
    for c, (tn, ta, cn, ca, fn, fa) in t.items():
        if not (fn or fa):
            continue
        out.append(CategoryRow(category=c, t_n_us=tn, t_a_us=ta,
                               share_n_pct=100.0 * tn / total_n if total_n > 0 else float("nan"),
                               share_a_pct=100.0 * ta / total_a if total_a > 0 else float("nan"), d_us=ta - tn,
                               calls_n=cn, calls_a=ca, functions_n=int(fn), functions_a=int(fa)))
    return tuple(out)

