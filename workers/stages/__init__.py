"""Stage handlers, registered by task type in `workers.stages.base.HANDLERS` on import.

Importing this package imports every handler module, so `from workers.stages import HANDLERS`
gives the complete registry.
"""

from workers.stages import analysis, compile, encode, library, noop, quality, transcode, webhook  # noqa: F401
from workers.stages.base import HANDLERS, stage

__all__ = ["HANDLERS", "stage"]
