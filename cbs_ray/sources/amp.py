"""The dtype the loop's autocast runs in for a precision on a device (None: full precision).
"""

from __future__ import annotations

from typing import Optional

import torch

# ---- pieces of the loop ----------------------------------------------------------------------------

def autocast_dtype(precision: str, device: torch.device) -> Optional[torch.dtype]:
    """The autocast dtype for ``precision`` on ``device`` (None: plain fp32)."""
    if precision == "auto":
        if device.type != "cuda":
            return None
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
