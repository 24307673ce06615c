"""``python -m megatron_sailor.convert from-hf DIR --out CKPT`` / ``to-hf CKPT --out DIR``."""
import sys

from megatron_sailor.convert.cli import main

sys.exit(main())
