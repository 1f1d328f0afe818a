"""sm_90a (Hopper) ragged attention forward kernel, CuTe DSL.

Entry points:
- `compile_forward(layout_class) -> compiled`: one compile per `LayoutClass`; works without a GPU
  (CUTE_DSL_ARCH=sm_90a). The result is a TVM-FFI function (`export_to_c` / `load_module` ready).
- `launch_forward(compiled, *, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_q,
  seqused_k, batch, max_seqlen_q, lse_s_max, softmax_scale, window_left, window_right,
  bottom_right, lse_strides, lse_base_is_log2, page_table, kv_layout, extended, sinks, softcap,
  num_splits, fresh_outputs, split_compiled, pack_rows, max_seqlen_k, batch_order, tail)`: launch on torch's
  current stream, no checks; page_table (B, max_pages)
  int32 with NHD/HND page pools for kv="paged" classes; extended=True with sinks / softcap for a
  -sinks / -softcap class (`compiled_args`); num_splits > 1: split-KV into a workspace, merged into
  out and lse (split_kv.py, whose `choose_num_splits` picks it from host integers; a class without
  an LSE splits through its LSE sibling's kernel, `split_compiled`); tail: a class built with
  TileConfig.tail_split (`COMPILED_ARGS_TAIL`; tail_split.py: the launch's last tiles in pieces).
See launch.py for argument semantics and forward.py for the kernel's structure.
"""

from .launch import (
    COMPILED_ARGS,
    COMPILED_ARGS_EXT,
    COMPILED_ARGS_TAIL,
    compile_forward,
    compiled_args,
    launch_forward,
    sm_count,
    tile_counter,
)

__all__ = ["COMPILED_ARGS", "COMPILED_ARGS_EXT", "COMPILED_ARGS_TAIL", "compile_forward", "compiled_args", "launch_forward", "sm_count", "tile_counter"]
