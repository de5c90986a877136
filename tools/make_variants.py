#!/usr/bin/env python3
"""Reference fixtures of every architecture at other shapes and another seed.

make_reference.py (beside this file, the project's fixture generator) makes
the tiny checkpoints in models/testdata/models. This runs the same generator
with a wider base shape (hidden 96, 6 query / 3 KV heads, FFN 192), a
40-token prompt and a different weight seed, so that parity is not tuned to
one shape. Runs where torch and transformers are (the GPU machine):

    python3 tools/make_variants.py OUT_DIR [name ...]
"""
import sys

import torch

import make_reference as mr

mr.BASE.update(hidden_size=96, num_attention_heads=6, num_key_value_heads=3, intermediate_size=192)
mr.T = 40
for name, spec in mr.ARCHS.items():
    if spec["model_type"].startswith("deepseek"):
        spec["num_key_value_heads"] = 6  # MLA: one latent for all 6 heads
_seed = torch.manual_seed
torch.manual_seed = lambda s: _seed(s + 4321)  # the weight seed; the prompt has its own generator

if __name__ == "__main__":
    out = sys.argv[1]
    for n in sys.argv[2:] or list(mr.ARCHS):
        try:
            mr.make(n, mr.ARCHS[n], out)
        except Exception as e:
            import traceback
            traceback.print_exc()
            print(f"{n}: FAILED {e!r}"[:400], flush=True)
