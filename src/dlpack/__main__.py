"""``python -m dlpack``: the interoperability matrix of the libraries installed."""

import sys

from dlpack.matrix import main

sys.exit(main())
