"""Has several side effects at once: reads the environment, logs and warns."""

import logging
import os
import warnings

LEVEL = os.getenv("CONFORMANCE_PROBE_NOISY_LEVEL")
logging.getLogger("conformance.probe.noisy").warning("noisy adapter loaded")
warnings.warn("noisy adapter", UserWarning, stacklevel=1)
