"""What the load generator sends: the datasets (random, random-range, ShareGPT, shared-prefix), the prompts
drawn from them and the JSON body of a request for each API (standard library only)."""

from __future__ import annotations

import hashlib
import json
import random

from .common import BenchError, is_number

DATASETS = ("random", "random-range", "sharegpt", "shared-prefix")
# Options each dataset takes (besides name); anything else is refused.
DATASET_OPTIONS = {
    "random": ("input_len", "output_len"),
    "random-range": ("input_len", "output_len", "range_ratio"),
    "sharegpt": ("path", "output_len", "max_conversations"),
    "shared-prefix": ("input_len", "output_len", "num_groups", "prefix_len"),
}


def _opt_int(ds, key, default, minimum=1):
    v = ds.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
        raise BenchError(f"dataset {ds.get('name')!r}: {key} must be an integer >= {minimum}, not {v!r}")
    return v


def make_dataset(spec, input_len, output_len, context_length=None):
    """Normalise the dataset mapping; returns (public description, [(prompt text, reply words)] or None)."""
    spec = dict(spec or {"name": "random"})
    name = spec.get("name", "random")
    if name not in DATASETS:
        raise BenchError(f"dataset name must be one of {', '.join(DATASETS)}, not {name!r}")
    unknown = sorted(set(spec) - {"name", *DATASET_OPTIONS[name]})
    if unknown:
        raise BenchError(
            f"dataset {name!r} has no option {', '.join(unknown)}; it takes {', '.join(DATASET_OPTIONS[name])}"
        )
    ds = {"name": name}
    pairs = None
    if name in ("random", "random-range", "shared-prefix"):
        ds["input_len"] = _opt_int(spec, "input_len", input_len)
        ds["output_len"] = _opt_int(spec, "output_len", output_len)
    if name == "random-range":
        ratio = spec.get("range_ratio", 0.0)
        if not is_number(ratio) or not 0 <= ratio <= 1:
            raise BenchError(f"dataset 'random-range': range_ratio must be in [0, 1], not {ratio!r}")
        ds["range_ratio"] = float(ratio)
    if name == "shared-prefix":
        ds["num_groups"] = _opt_int(spec, "num_groups", 4)
        ds["prefix_len"] = _opt_int(spec, "prefix_len", 512)
    if name == "sharegpt":
        if spec.get("output_len") is not None:
            ds["output_len"] = _opt_int(spec, "output_len", None)
        if spec.get("max_conversations") is not None:
            ds["max_conversations"] = _opt_int(spec, "max_conversations", None)
        ds["path"] = spec.get("path")
        pairs, ds["digest"] = load_sharegpt(ds["path"], ds.get("max_conversations"))
        ds["conversations"] = len(pairs)
    if context_length is not None and name != "sharegpt":
        need = ds.get("prefix_len", 0) + ds["input_len"] + ds["output_len"]
        if need > context_length:
            what = "shared prefix + question + output" if name == "shared-prefix" else "input + output"
            raise BenchError(
                f"dataset {name!r}: {what} = {need} tokens is longer than the context ({context_length} tokens)"
            )
    return ds, pairs


def load_sharegpt(path, max_conversations=None):
    """[(first human turn, word count of the reply)] from a ShareGPT-format JSON file, and its sha256."""
    if not path or not isinstance(path, str):
        raise BenchError("dataset 'sharegpt' needs path: a ShareGPT-format JSON file")
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise BenchError(f"dataset 'sharegpt': cannot read {path}: {exc.strerror or exc}") from exc
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BenchError(f"dataset 'sharegpt': {path} is not valid JSON: {exc}") from exc
    if not isinstance(doc, list):
        raise BenchError(f"dataset 'sharegpt': {path} must hold a JSON list of conversations")
    pairs = []
    for item in doc:
        turns = item.get("conversations", item.get("conversation")) if isinstance(item, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        first, second = turns[0], turns[1]
        if not (isinstance(first, dict) and isinstance(second, dict)):
            continue
        prompt, reply = first.get("value"), second.get("value")
        if not (isinstance(prompt, str) and prompt.strip() and isinstance(reply, str) and reply.strip()):
            continue
        pairs.append((prompt, max(1, len(reply.split()))))
        if max_conversations and len(pairs) >= max_conversations:
            break
    if not pairs:
        raise BenchError(
            f"dataset 'sharegpt': {path} holds no usable conversation (need items with 'conversations': "
            "[{from, value}, {from, value}, ...], a non-empty prompt and reply)"
        )
    return pairs, "sha256:" + hashlib.sha256(raw).hexdigest()


def make_prompt(rng, input_len, vocab_size):
    return [rng.randrange(100, max(vocab_size, 101)) for _token in range(input_len)]


_WORDS = tuple(
    [
        "time",
        "person",
        "year",
        "way",
        "day",
        "thing",
        "man",
        "world",
        "life",
        "hand",
        "part",
        "child",
        "eye",
        "woman",
        "place",
        "work",
        "week",
        "case",
        "point",
        "number",
        "group",
        "problem",
        "fact",
        "river",
        "stone",
        "light",
        "water",
        "field",
        "table",
        "paper",
        "window",
        "garden",
        "music",
        "letter",
    ]
)


def make_workload(cfg, rng, n):
    """n (prompt, output_len) pairs of the configured dataset; prompt = token ids or text (sharegpt)."""
    ds = cfg.get("dataset") or {"name": "random"}
    name = ds["name"]
    vocab = cfg["vocab_size"]
    out = []
    if name == "sharegpt":
        pairs = cfg.get("_pairs") or []
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for i in range(n):
            prompt, words = pairs[order[i % len(order)]]
            out.append((prompt, ds.get("output_len") or words))
        return out
    in_len, out_len = ds.get("input_len", cfg["input_len"]), ds.get("output_len", cfg["output_len"])
    if name == "shared-prefix":
        # the same system prompts at every level (flush_cache runs between levels), one per group
        prefixes = [
            make_prompt(random.Random(f"{cfg['seed']}:prefix:{g}"), ds["prefix_len"], vocab)
            for g in range(ds["num_groups"])
        ]
        return [(prefixes[i % len(prefixes)] + make_prompt(rng, in_len, vocab), out_len) for i in range(n)]
    for _request in range(n):
        if name == "random-range":
            ratio = ds["range_ratio"]
            a = rng.randint(max(int(in_len * ratio), 1), in_len)
            b = rng.randint(max(int(out_len * ratio), 1), out_len)
        else:
            a, b = in_len, out_len
        out.append((make_prompt(rng, a, vocab), b))
    return out


def request_body(cfg, rid, prompt_ids, output_len, rng):
    """The JSON body for one request of the configured api (bytes); prompt_ids: token ids or text."""
    api = cfg["api"]
    text_prompt = isinstance(prompt_ids, str)
    if api == "generate":
        body = {
            ("text" if text_prompt else "input_ids"): prompt_ids,
            "sampling_params": {
                "temperature": cfg["temperature"],
                "max_new_tokens": output_len,
                "ignore_eos": True,
            },
            "stream": True,
            "rid": rid,
        }
    else:
        body = {"model": cfg["model"]}
        if api == "completions":
            body["prompt"] = prompt_ids
        else:
            # Chat takes text: random common words, about one token each; the server's
            # prompt_tokens (usage) says what it really was.
            # (word i follows token id i, so a shared prefix of ids stays a shared prefix of text)
            text = prompt_ids if text_prompt else " ".join(_WORDS[t % len(_WORDS)] for t in prompt_ids)
            body["messages"] = [{"role": "user", "content": text}]
        body.update(
            {
                "max_tokens": output_len,
                "temperature": cfg["temperature"],
                "ignore_eos": True,
                "stream": True,
                "stream_options": {"include_usage": True},
                "rid": rid,
            }
        )
    return json.dumps(body, separators=(",", ":")).encode()
