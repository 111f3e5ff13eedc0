"""A stand-in for `python -m sglang.launch_server` on a machine without a GPU.

It parses SGLang's command line, asks the planner (`sglang_layouts.plan.planner`) what the
layout would do on the simulated hardware, writes SGLang's log lines, and then either
fails the way SGLang fails or serves SGLang's HTTP API with token timing from a
continuous-batching cost model. Standard library only; see README.md.
"""

import importlib.util
import os
import sys
from pathlib import Path

# The SGLang release the simulator stands in for: its command line is that release's flag table.
# The service role passes the host's sglang_version; 0.5.23 is the release it was written against.
SGLANG_VERSION = os.environ.get("SGLANG_SIM_SGLANG_VERSION") or "0.5.23"
__version__ = f"{SGLANG_VERSION}-sim"

# In the repo the planner lives in <repo>/module_utils/sglang_layouts; on a host the
# service role copies sglang_sim/ and sglang_layouts/ side by side (PYTHONPATH).
if importlib.util.find_spec("sglang_layouts") is None:
    _mu = Path(__file__).resolve().parent.parent / "module_utils"
    if (_mu / "sglang_layouts").is_dir():
        sys.path.insert(0, str(_mu))
