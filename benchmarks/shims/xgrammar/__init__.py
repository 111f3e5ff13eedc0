"""Stand-in for xgrammar on a GPU lease whose wheel set leaves it out (SGLang 0.5.16 with
--grammar-backend none).

SGLang imports xgrammar at module level in one place (function_call/inkling_detector.py:
`from xgrammar import StructuralTag`, used as a type hint); elsewhere a failed import falls back
to `StructuralTag = Any`. This gives that fallback; any other name raises ImportError, so the
optional imports take their fallback path. Not for a grammar backend: there the real xgrammar is
a dependency. benchmarks/gpu_lease.sh puts it in /opt/shims (sglang_venv_extra_paths).
"""

from typing import Any

StructuralTag = Any
