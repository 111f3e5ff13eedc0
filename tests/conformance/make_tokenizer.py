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


def corpus():
    stdlib = os.path.dirname(os.__file__)
    for path in sorted(glob.glob(os.path.join(stdlib, "*.py")))[:200]:
        with open(path, encoding="utf-8", errors="ignore") as f:
            yield f.read()


def main() -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    out = sys.argv[1]
    vocab_size = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<pad>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    hf.chat_template = (
        "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
    )
    hf.save_pretrained(out)
    cfg_path = os.path.join(out, "tokenizer_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["chat_template"] = hf.chat_template
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    print(json.dumps({"dir": out, "vocab": len(hf), "bos": hf.bos_token_id, "eos": hf.eos_token_id}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
