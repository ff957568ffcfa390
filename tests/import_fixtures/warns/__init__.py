"""Issues a deprecation warning on import."""

import warnings

warnings.warn("this adapter API is deprecated", DeprecationWarning, stacklevel=1)
