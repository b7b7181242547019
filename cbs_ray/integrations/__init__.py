"""cbs-ray's answer applied in your own training run: a batch-size schedule (``BatchSizeSchedule``, built by hand
or from a report's ``summary.json``) and the gradient noise scale, for HF Trainer (``integrations.hf``),
Lightning (``integrations.lightning``) and plain PyTorch loops (``integrations.torch_loop``). Importing this
package needs neither Ray nor torch; HF and Lightning are imported only by their own modules. docs/integrations.md.
"""

from cbs_ray.integrations.errors import ScheduleError
from cbs_ray.integrations.schedule import BatchSizeSchedule, Stage

__all__ = ["BatchSizeSchedule", "ScheduleError", "Stage"]
