"""Run only when Python mistakes this folder, the project's root, for the niofetcher package.

That happens with ``python -m niofetcher`` in the folder that holds a clone named ``niofetcher``:
the current directory comes first on the module path, and a folder of that name without an
``__init__.py`` passes for a namespace package, ahead of the package installed in editable mode.
What would follow is a confusing ImportError; this says what is wrong instead.
"""

import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.stderr.write(
    f"niofetcher: {here} is the niofetcher project folder, not the package; Python took it for the "
    f"package because it is in the current directory. Run the command from another directory, or "
    f"inside {here} itself.\n"
)
sys.exit(2)
