"""tools/sass_static.py's listing parser and loop finder, on a synthetic nvdisasm listing."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import sass_static

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   FMNMX R2, R3, R4, !PT ;
.L_x_1:
        /*0020*/                   MUFU.EX2 R5, R5 ;
        /*0030*/              @!P0 BRA `(.L_x_1) ;
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR20], RZ, !UPT ;
        /*0050*/               @P1 BRA `(.L_x_0) ;
        /*0060*/               @P2 BRA `(.L_x_2) ;
.L_x_2:
        /*0070*/                   EXIT ;
"""


def test_parse_and_loops_innermost_first():
    insns, labels = sass_static.parse(LISTING)
    assert [op for _, op, _ in insns] == ["MOV", "FMNMX", "MUFU.EX2", "BRA", "HGMMA.64x128x16.F32.BF16", "BRA", "BRA", "EXIT"]
    assert labels == {".L_x_0": 1, ".L_x_1": 2, ".L_x_2": 7}
    assert sass_static.loops(insns, labels) == [(2, 3), (1, 5)]  # the forward branch to .L_x_2 is no loop
    text = sass_static.summarize(insns, 1, 5)
    assert text.startswith("loop [1, 5]: 5 instructions, uniform datapath 0; HGMMA 1, MUFU 1, FMNMX 1")
    assert "last wgmma wait" not in text  # no WARPGROUP.DEPBAR in this loop


WAIT_LISTING = """
.L_x_0:
        /*0000*/                   FFMA R2, R3, R4, R5 ;
        /*0010*/                   MUFU.EX2 R2, R2 ;
        /*0020*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0030*/                   FFMA R6, R3, R4, R5 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   MUFU.EX2 R6, R6 ;
        /*0060*/               @P1 BRA `(.L_x_0) ;
"""


def test_summarize_gives_the_last_wgmma_wait_and_the_softmax_before_it():
    insns, labels = sass_static.parse(WAIT_LISTING)
    assert sass_static.loops(insns, labels) == [(0, 6)]
    text = sass_static.summarize(insns, 0, 6)
    assert text.endswith("last wgmma wait at 4; before it FFMA 2, MUFU 1")
