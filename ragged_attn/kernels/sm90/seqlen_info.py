"""Per-tile sequence metadata for ragged (THD) batches, read once per CTA.

`SeqlenInfo` hides where a sequence starts and how long it is:
- offset_q / offset_k: cu_seqlens_q[b] / cu_seqlens_k[b] (token offsets into the packed tensors);
- len_q / len_k: seqused_q[b] / seqused_k[b] when the matching run-time flag is non-zero, else the
  gap cu_seqlens[b + 1] - cu_seqlens[b] (FlashAttention 3's names and precedence);
- offset_o: the row of the sequence's first query in the outputs (O rows and token-row LSE
  entries): offset_q, or with split-KV offset_q + split * total_q (`for_split`: split s of a launch
  with num_splits > 1 stores into rows [s * total_q, (s + 1) * total_q) of the workspace). Q's loads
  keep offset_q.

The seqused tensors are always arguments (the host passes cu_seqlens as a dummy when absent) so
that their presence is a run-time flag, not a compile-time variant.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32


class SeqlenInfo:
    def __init__(self, offset_q: Int32, offset_k: Int32, len_q: Int32, len_k: Int32, offset_o: Int32 = None):
        self.offset_q = offset_q
        self.offset_k = offset_k
        self.len_q = len_q
        self.len_k = len_k
        self.offset_o = offset_q if offset_o is None else offset_o

    @cute.jit
    def for_split(self, split: Int32, total_q: Int32) -> "SeqlenInfo":
        """This sequence as split `split` stores it: offset_o = offset_q + split * total_q (rows of
        the split-major workspace; int32, the launch keeps num_splits * total_q below 2**31)."""
        return SeqlenInfo(self.offset_q, self.offset_k, self.len_q, self.len_k, self.offset_q + split * total_q)

    @staticmethod
    @cute.jit
    def create(
        batch_idx: Int32,
        mCuSeqlensQ: cute.Tensor,  # (B + 1,) int32
        mCuSeqlensK: cute.Tensor,  # (B + 1,) int32
        mSeqUsedQ: cute.Tensor,  # (B,) int32, or a dummy when use_seqused_q == 0
        mSeqUsedK: cute.Tensor,  # (B,) int32, or a dummy when use_seqused_k == 0
        use_seqused_q: Int32,
        use_seqused_k: Int32,
    ) -> "SeqlenInfo":
        offset_q = Int32(mCuSeqlensQ[batch_idx])
        offset_k = Int32(mCuSeqlensK[batch_idx])
        len_q = Int32(mCuSeqlensQ[batch_idx + 1]) - offset_q
        len_k = Int32(mCuSeqlensK[batch_idx + 1]) - offset_k
        if use_seqused_q != 0:
            len_q = Int32(mSeqUsedQ[batch_idx])
        if use_seqused_k != 0:
            len_k = Int32(mSeqUsedK[batch_idx])
        return SeqlenInfo(offset_q, offset_k, len_q, len_k)

    # Device values travel through runtime control flow as a flat list of IR values.
    def __extract_mlir_values__(self):
        values = []
        for v in (self.offset_q, self.offset_k, self.len_q, self.len_k, self.offset_o):
            values += cutlass.extract_mlir_values(v)
        return values

    def __new_from_mlir_values__(self, values):
        return SeqlenInfo(*[Int32(v) for v in values])
