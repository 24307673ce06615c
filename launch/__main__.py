"""``python -m launch``: see :mod:`launch.cli`."""
import sys

from launch.cli import main

sys.exit(main())
