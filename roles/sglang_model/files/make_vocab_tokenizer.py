"""Write a word-level tokenizer whose vocabulary is a model's vocab_size, beside its config.json.

usage: make_vocab_tokenizer.py MODEL_DIR

For dummy weights (--load-format dummy) a config-only model folder needs a tokenizer the engine
can load offline. Token i is the word "t<i>" (the config's bos/eos ids are <s> and </s>), so every
id a random-weight model emits decodes to non-empty text, which streaming clients need to time
each token. Needs `tokenizers` and `transformers` (both in SGLang's venv).
"""

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def first_id(value):
    if isinstance(value, list):
        return value[0] if value else None
    return value


def main(model_dir: str) -> int:
    folder = Path(model_dir)
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config") or config
    size = int(text.get("vocab_size") or config["vocab_size"])
    special = {first_id(text.get("bos_token_id", config.get("bos_token_id"))): "<s>"}
    special[first_id(text.get("eos_token_id", config.get("eos_token_id")))] = "</s>"
    vocab = {special.get(i, f"t{i}"): i for i in range(size)}
    for name in ("<s>", "</s>"):  # ids outside the vocabulary: add them at its end
        vocab.setdefault(name, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="</s>", unk_token="t0"
    )
    fast.save_pretrained(str(folder))
    print(json.dumps({"dir": str(folder), "vocab": len(fast), "sample": fast.decode([5, 77, size - 1])}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
