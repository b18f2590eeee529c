"""The test site's first name, kept for programs written against it: ``niofetcher.testsite`` is ``niofetcher.testing``."""

import sys

from . import testing

sys.modules[__name__] = testing
