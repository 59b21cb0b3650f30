"""Stage handlers, registered by task type in `workers.stages.base.HANDLERS` on import.

Importing this package imports every handler module, so `from workers.stages import HANDLERS`
gives the complete registry.
"""

from workers.stages import (  # noqa: F401
    analysis,
    compile,
    encode,
    library,
    noop,
    quality,
    split,
    split_quality,
    split_reencode,
    split_stitch,
    transcode,
    webhook,
)
from workers.stages.base import HANDLERS, stage

__all__ = ["HANDLERS", "stage"]
