"""Reading a framework's and Megatron's source without running either: which files are a framework's modules (every
package layout Python imports), and which dotted names are Megatron's. Used by the api-fingerprint family's
from-source verdicts, ``scan`` and ``bisect``. Imports only ``formats``."""
