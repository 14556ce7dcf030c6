"""``python -m dlpack``: the interoperability matrix; ``python -m dlpack check``: the checker."""

import sys

if sys.argv[1:2] == ["check"]:
    from dlpack.tools.check_cli import main

    sys.exit(main(sys.argv[2:]))
from dlpack.tools.matrix import main

sys.exit(main())
