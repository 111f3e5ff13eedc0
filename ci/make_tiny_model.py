"""Build a tiny random-weight causal LM that a real vLLM (or SGLang) can serve on CPU.

Run with a python that has torch, transformers and tokenizers (the vllm venv has them):

    .venv/vllm/bin/python ci/make_tiny_model.py [OUT] [--arch qwen2|llama] [--dtype float32]

OUT defaults to build/models/tiny-<arch>. The model: hidden 64, 2 attention heads and 1 KV
head (head_dim 32: vLLM's CPU attention accepts head_dim in {32, 64, 80, 96, 112, 128, 160,
192, 224, 256, 512}; head_dim 16 passes startup and /health, then the first request kills the
engine), 2 layers, intermediate 128, vocab 1024, max_position_embeddings 2048, untied
embeddings, ~205k parameters, safetensors. The tokenizer is a byte-level BPE (any text
encodes) trained here on a synthetic corpus, with <s> </s> <pad>, a BOS post-processor and a
chat template, so /v1/completions and /v1/chat/completions both work.

Offline and deterministic: no network, fixed seeds, and a corpus generated from a fixed word
list (not the interpreter's stdlib, which differs between Python releases). Two runs with the
same torch/transformers/tokenizers give byte-identical files. Idempotent: OUT/.tiny-model-key
records what built it; when it matches, nothing is done. The build happens in a temporary
sibling directory that is renamed into place, so OUT is either complete or absent.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KEY_FILE = ".tiny-model-key"
VOCAB_SIZE = 1024
SPECIALS = ("<s>", "</s>", "<pad>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}\n{{ m['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)
SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
}
WORDS = """
the a an of to in on for with by from at as is are was were be been has have had do does did
not no yes and or but if then else when while where which who what how why this that these
those it its they them their we our you your he she his her model layout server engine token
tokens batch request response memory cache weight weights expert experts layer layers tensor
pipeline data parallel rank ranks node nodes host hosts gpu gpus cpu kernel attention head
heads hidden vocab context length prefill decode stream latency throughput benchmark plan
deploy start stop ready health error out fits split shard shards group groups router port
def return class import self none true false print value values list dict key keys item
items index count size sum max min time test run build file path name line lines text
""".split()  # noqa: SIM905 (a word list reads better as text)
PUNCT = [".", ",", ":", ";", "?", "!", "(", ")", "=", "+", "-", "_", "/", "'", '"', "\n", "\n\n", "    "]


def corpus(seed: int = 0, n_lines: int = 6000):
    """Deterministic pseudo-text: sentences and code-like lines over WORDS, digits, punctuation."""
    rng = random.Random(seed)
    for i in range(n_lines):
        k = rng.randint(3, 14)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.78:
                w = rng.choice(WORDS)
                parts.append(w.capitalize() if rng.random() < 0.1 else w)
            elif r < 0.88:
                parts.append(str(rng.randint(0, 4096)))
            else:
                parts.append(rng.choice(PUNCT))
        yield " ".join(parts) + ("\n" if i % 3 else ".\n")


def versions() -> dict:
    return {p: md.version(p) for p in ("torch", "transformers", "tokenizers", "safetensors")}


def build_key(arch: str, dtype: str) -> str:
    h = hashlib.sha256(Path(__file__).read_bytes())
    h.update(json.dumps({"arch": arch, "dtype": dtype, "versions": versions()}, sort_keys=True).encode())
    return h.hexdigest()


def build_tokenizer(out: Path, texts=None, vocab_size: int = VOCAB_SIZE):
    """Train the byte-level BPE on `texts` (default: corpus()) and save it in `out` as a Hugging
    Face tokenizer folder; tests/conformance/make_tokenizer.py trains the same one on other text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus() if texts is None else texts, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(out))
    # transformers 5 writes tokenizer_class "TokenizersBackend" and the template in a side file;
    # name the class transformers 4 knows and inline the template so either major version loads it.
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return hf


def build_model(out: Path, arch: str, dtype: str, tok) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    classes = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM)}
    config_cls, model_cls = classes[arch]
    config = config_cls(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **SHAPE,
    )
    torch.manual_seed(0)
    model = model_cls(config).to(getattr(torch, dtype))
    model.save_pretrained(str(out), safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", help="output directory (default build/models/tiny-<arch>)")
    ap.add_argument("--arch", choices=("qwen2", "llama"), default="qwen2")
    ap.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    ap.add_argument("--force", action="store_true", help="rebuild even when the key matches")
    args = ap.parse_args(argv)
    out = Path(args.out or REPO / "build" / "models" / f"tiny-{args.arch}").resolve()
    key = build_key(args.arch, args.dtype)
    if not args.force and (out / KEY_FILE).is_file() and (out / KEY_FILE).read_text().strip() == key:
        print(f"up to date: {out}")
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        tok = build_tokenizer(tmp)
        n = build_model(tmp, args.arch, args.dtype, tok)
        (tmp / KEY_FILE).write_text(key + "\n")
        # mkdtemp makes 0700 and safetensors writes 0600: a service user must be able to read it.
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    head_dim = SHAPE["hidden_size"] // SHAPE["num_attention_heads"]
    print(
        f"built {args.arch} {args.dtype} in {out}: params={n} vocab={len(tok)} head_dim={head_dim} "
        f"bos={tok.bos_token_id} eos={tok.eos_token_id} pad={tok.pad_token_id}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
