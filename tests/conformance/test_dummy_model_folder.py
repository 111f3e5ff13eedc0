"""The dummy-weight model folder (role sglang_model) loads as a tokenizer in SGLang's own stack.

The role's script runs under the oracle python (SGLang's venv on CPU: tokenizers, transformers),
then transformers' AutoTokenizer, as SGLang loads it, must round-trip every id of the model's
vocabulary to a non-empty word."""

import json
import shutil

from conftest import REPO, run_oracle

SCRIPT = REPO / "roles" / "sglang_model" / "files" / "make_vocab_tokenizer.py"


def test_the_tokenizer_covers_the_whole_vocabulary(tmp_path, oracle_python):
    folder = tmp_path / "qwen3-30b-a3b"
    folder.mkdir()
    shutil.copy(REPO / "models" / "qwen3-30b-a3b" / "config.json", folder / "config.json")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    run_oracle(oracle_python, [str(SCRIPT), str(folder)], timeout=300)
    check = (
        "import sys\n"
        "from transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "n = int(sys.argv[2])\n"
        "ids = [5, 77, n - 1]\n"
        "print(len(t), t.decode(ids), t('t5 t77').input_ids)\n"
    )
    out = run_oracle(oracle_python, ["-c", check, str(folder), str(vocab)], timeout=300).stdout.split()
    assert int(out[0]) >= vocab
    assert out[1:4] == ["t5", "t77", f"t{vocab - 1}"]
    assert "".join(out[4:]) == "[5,77]"
