"""`python -m ragged_attn.bench ...`: the same as `python -m ragged_attn bench ...`."""

import sys

from . import main

sys.exit(main(sys.argv[1:]))
