"""Train a tiny byte-level BPE tokenizer offline and save it as a Hugging Face tokenizer dir.

Run by the ORACLE python (it has `tokenizers` and `transformers`):

    <oracle python> tests/conformance/make_tokenizer.py OUT_DIR [VOCAB_SIZE]

bench_serving needs a tokenizer it can load from disk (`--tokenizer DIR`, no Hub access): it
decodes random-ids prompts and re-tokenizes the generated text. The corpus is the Python
standard library's own sources, so no download is needed and the result is the same on
every machine with the same Python and `tokenizers`. Vocab 1024, specials <s> </s> <pad>,
a BOS post-processor and a chat template. `tokenizer_class` is written as
PreTrainedTokenizerFast (not transformers 5's TokenizersBackend) so transformers 4 loads it too.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from pathlib import Path


def corpus():
    stdlib = os.path.dirname(os.__file__)
    for path in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:200]:
        with open(path, encoding="utf-8", errors="ignore") as f:
            yield f.read()


def main() -> int:
    # the tiny model's builder: the same tokenizer recipe, trained here on the stdlib's sources
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ci"))
    from make_tiny_model import build_tokenizer

    out = sys.argv[1]
    vocab_size = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    hf = build_tokenizer(Path(out), corpus(), vocab_size)
    print(json.dumps({"dir": out, "vocab": len(hf), "bos": hf.bos_token_id, "eos": hf.eos_token_id}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
