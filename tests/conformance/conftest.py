"""Conformance fixtures: the pinned SGLang's own code, run on CPU, judges our output.

`make oracle` builds .venv/sglang (ci/oracle.sh): SGLang installed with --no-deps plus the
CPU packages its argument parser and bench_serving import. `make conformance` points
SGLANG_ORACLE_PY at that venv's python. These tests never skip: without the oracle they FAIL
and say how to build it.

Fixtures and helpers for other conformance tests:

- `oracle_python`: path of the oracle python (str); `oracle_sglang_version`: the release it holds.
- `oracle_env()`: the environment to run it with (offline, no PYTHONPATH leaking in).
- `oracle_tokenizer`: a tiny offline tokenizer dir (built once, cached under build/).
- `sglang_model_dir(dest, config)`: a directory SGLang's ModelConfig can load from a config.json
  alone (see the function for the Kimi K2.x custom-code workaround).
- `run_bench_serving`: fixture returning `run(base_url, backend, num_prompts, input_len,
  output_len, concurrency, extra_args=()) -> dict`, the JSONL row `python -m sglang.bench_serving`
  wrote for that run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

# the oracle's environment has one source, shared with the benchmarks that run the oracle
from benchmarks.sim_oracle import oracle_env
from tests.helpers.procs import isolated_env, run_captured, tail

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ORACLE_DEFAULT = REPO / ".venv" / "sglang" / "bin" / "python"
BUILD = REPO / "build" / "conformance"
# bench_serving's module in the pinned SGLang. 0.5.23 moved the code to sglang.benchmark.serving
# and keeps sglang.bench_serving as a deprecated alias (FutureWarning) that runs the same cli_main.
BENCH_SERVING_MODULE = "sglang.bench_serving"


class OracleError(AssertionError):
    """The oracle python ran but did not do what was asked; the message carries its output."""


def _resolve_oracle_python() -> Path:
    env = os.environ.get("SGLANG_ORACLE_PY")
    how = "Run `make oracle` (it runs ci/oracle.sh .venv/sglang <sglang_version>), then `make conformance`."
    if env:
        path = Path(env)
        if not (path.is_file() and os.access(path, os.X_OK)):
            pytest.fail(f"SGLANG_ORACLE_PY={env} is not an executable python. {how}", pytrace=False)
        return path
    if not (ORACLE_DEFAULT.is_file() and os.access(ORACLE_DEFAULT, os.X_OK)):
        pytest.fail(
            f"The SGLang oracle venv is missing ({ORACLE_DEFAULT.relative_to(REPO)} not found) and "
            f"SGLANG_ORACLE_PY is not set. {how}",
            pytrace=False,
        )
    return ORACLE_DEFAULT


@pytest.fixture(scope="session")
def oracle_sglang_version(oracle_python) -> str:
    """The SGLang release the oracle venv holds (its metadata; sglang is not imported)."""
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    return run_oracle(oracle_python, ["-c", code], timeout=60).stdout.strip()


def run_oracle(
    python: str | Path, args: list[str], *, timeout: float = 300, cwd=None
) -> subprocess.CompletedProcess:
    """Run the oracle python; on failure raise OracleError with the command and its output."""
    cmd = [str(python), *map(str, args)]
    try:
        proc = subprocess.run(
            cmd, env=oracle_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise OracleError(
            f"{' '.join(cmd)} ran past {timeout}s:\n{tail(str(e.stdout))}\n{tail(str(e.stderr))}"
        ) from None
    if proc.returncode != 0:
        raise OracleError(
            f"{' '.join(cmd)} exited {proc.returncode}\n--- stdout ---\n{tail(proc.stdout)}\n"
            f"--- stderr ---\n{tail(proc.stderr)}"
        )
    return proc


@pytest.fixture(scope="session")
def oracle_python() -> str:
    return str(_resolve_oracle_python())


@pytest.fixture(scope="session")
def oracle_version(oracle_python) -> str:
    proc = run_oracle(oracle_python, ["-c", "import importlib.metadata as m; print(m.version('sglang'))"])
    return proc.stdout.strip()


# ---------------------------------------------------------------------------
# A model directory SGLang can load from config.json alone
# ---------------------------------------------------------------------------

# SGLang's registry of config classes moved between releases; the stub tries each home.
_CUSTOM_CODE_STUB = '''"""Stand-in for the Hugging Face repo's {module}.py (custom code); see tests/conformance/conftest.py.

transformers follows config.json's auto_map to this file when SGLang runs with
--trust-remote-code. SGLang then reloads the config with its own registered class for
model_type {model_type!r} (_CONFIG_REGISTRY), so that class is what this stub hands out.
"""
_CONFIG_REGISTRY = None
for _home in ("sglang.srt.utils.hf_transformers.common", "sglang.srt.utils.hf_transformers_utils",
              "sglang.srt.hf_transformers_utils"):
    try:
        _CONFIG_REGISTRY = __import__(_home, fromlist=["_CONFIG_REGISTRY"])._CONFIG_REGISTRY
        break
    except (ImportError, AttributeError):
        continue
if _CONFIG_REGISTRY is None or {model_type!r} not in _CONFIG_REGISTRY:
    raise ImportError("this SGLang has no registered config class for model_type {model_type!r}")
{cls} = _CONFIG_REGISTRY[{model_type!r}]
'''


def sglang_model_dir(dest: Path, config: dict | Path, *, custom_code_stub: bool = True) -> Path:
    """Write `dest/config.json` (and, if needed, a stub of the repo's custom config code).

    Why a stub: Kimi K2.6's config.json (architectures KimiK25ForConditionalGeneration,
    model_type kimi_k25) carries `auto_map: {"AutoConfig": "configuration_kimi_k25.KimiK25Config"}`.
    SGLang 0.5.23 registers its own KimiK25Config for kimi_k25, and without
    --trust-remote-code transformers uses it: the config loads from config.json alone. With
    --trust-remote-code (what the demo's layouts and the seed pass) transformers prefers the
    repo's code and fails with "OSError: ... does not appear to have a file named
    configuration_kimi_k25.py" (tested in test_sglang_parser.py). On a real host that file comes
    with the weights. We cannot download it, and SGLang discards the class it defines anyway:
    its HF parser reloads the config through _CONFIG_REGISTRY["kimi_k25"]. So the most faithful
    stand-in is a file that hands out SGLang's own registered class: config.json stays
    byte-for-byte the shipped one, and SGLang validates against the config object it would
    build on the GPU host. (Rewriting config.json as a text-only deepseek_v3 config would
    change what SGLang sees: architecture, multimodal handling, quantization propagation.)
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if isinstance(config, Path):
        shutil.copyfile(config, dest / "config.json")
        config = json.loads(config.read_text())
    else:
        (dest / "config.json").write_text(json.dumps(config, indent=2))
    auto_config = (config.get("auto_map") or {}).get("AutoConfig")
    if custom_code_stub and auto_config and "." in auto_config and "--" not in auto_config:
        module, cls = auto_config.rsplit(".", 1)
        (dest / f"{module}.py").write_text(
            _CUSTOM_CODE_STUB.format(module=module, cls=cls, model_type=config.get("model_type"))
        )
    return dest


# ---------------------------------------------------------------------------
# bench_serving
# ---------------------------------------------------------------------------


def _tokenizer_key(oracle_python: str) -> str:
    # make_tokenizer.py trains with ci/make_tiny_model.py's recipe: a change to either is a new tokenizer
    script = (HERE / "make_tokenizer.py").read_bytes() + (
        HERE.parents[1] / "ci" / "make_tiny_model.py"
    ).read_bytes()
    proc = run_oracle(
        oracle_python,
        [
            "-c",
            "import importlib.metadata as m, sys; print(sys.version, m.version('tokenizers'), m.version('transformers'))",
        ],
    )
    return hashlib.sha256(script + proc.stdout.encode()).hexdigest()[:16]


@pytest.fixture(scope="session")
def oracle_tokenizer(oracle_python) -> Path:
    """A 1024-token byte-level BPE tokenizer, trained offline; cached in build/conformance/."""
    out = BUILD / f"tokenizer-{_tokenizer_key(oracle_python)}"
    if (out / "tokenizer.json").is_file():
        return out
    BUILD.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=BUILD))
    try:
        run_oracle(oracle_python, [HERE / "make_tokenizer.py", tmp / "tok"], timeout=300)
        try:
            (tmp / "tok").rename(out)  # atomic: a concurrent run either wins or finds it built
        except OSError:
            if not (out / "tokenizer.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def bench_serving_argv(
    base_url: str,
    backend: str,
    num_prompts: int,
    input_len: int,
    output_len: int,
    concurrency: int | None,
    tokenizer: Path | str,
    output_file: Path | str,
    extra_args=(),
) -> list[str]:
    """Arguments of `python -m sglang.bench_serving` for one fixed-length random-ids run."""
    argv = [
        "-m",
        BENCH_SERVING_MODULE,
        "--backend",
        backend,
        "--base-url",
        base_url,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(input_len),
        "--random-output-len",
        str(output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(num_prompts),
        "--tokenizer",
        str(tokenizer),
        "--output-file",
        str(output_file),
        "--seed",
        "1",
    ]
    if concurrency is not None:
        argv += ["--max-concurrency", str(concurrency)]
    return argv + [str(a) for a in extra_args]


@pytest.fixture
def run_bench_serving(oracle_python, oracle_tokenizer, tmp_path):
    """`run(base_url, backend="sglang", num_prompts=.., input_len=.., output_len=.., concurrency=..,
    extra_args=(), timeout=300) -> dict`: run SGLang's bench_serving against base_url and return
    the JSONL row it wrote (completed, duration, output_throughput, mean_ttft_ms, ...).
    The raw stdout is under the key "_stdout". Raises OracleError (an AssertionError) with the
    client's output when it exits non-zero or writes no row."""
    runs = iter(range(1_000_000))

    def run(
        base_url: str,
        backend: str = "sglang",
        num_prompts: int = 8,
        input_len: int = 32,
        output_len: int = 16,
        concurrency: int | None = 4,
        extra_args=(),
        timeout: float = 300,
    ) -> dict:
        out = tmp_path / f"bench-serving-{next(runs)}.jsonl"
        argv = bench_serving_argv(
            base_url,
            backend,
            num_prompts,
            input_len,
            output_len,
            concurrency,
            oracle_tokenizer,
            out,
            extra_args,
        )
        proc = run_oracle(oracle_python, argv, timeout=timeout, cwd=tmp_path)
        rows = [line for line in out.read_text().splitlines() if line.strip()] if out.is_file() else []
        if not rows:
            raise OracleError(
                f"bench_serving exited 0 but wrote no row to {out}\n{tail(proc.stdout)}\n{tail(proc.stderr)}"
            )
        row = json.loads(rows[-1])
        row["_stdout"] = proc.stdout
        return row

    return run


def pytest_report_header(config):
    py = os.environ.get("SGLANG_ORACLE_PY") or str(ORACLE_DEFAULT)
    return f"sglang oracle python: {py}" + ("" if Path(py).exists() else " (missing: run `make oracle`)")


# ---------------------------------------------------------------------------
# SGLang's parser and validator as a judge of command lines
# ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def judge_argvs(oracle_python, tmp_path_factory):
    """`judge(cases, flags_out=None) -> dict`: run tests/conformance/oracle_check_args.py once
    (one import of SGLang) over cases [{"id", "argv"}]; returns its results document.
    With flags_out, the same process also writes ci/dump_sglang_flags.py's document there."""

    def judge(cases: list[dict], flags_out: Path | None = None) -> dict:
        work = tmp_path_factory.mktemp("oracle-judge")
        cases_path, results_path = work / "cases.json", work / "results.json"
        cases_path.write_text(json.dumps(cases))
        args = [HERE / "oracle_check_args.py", cases_path, results_path]
        if flags_out is not None:
            args.append(flags_out)
        run_oracle(oracle_python, args, timeout=600, cwd=work)
        return json.loads(results_path.read_text())

    return judge


@pytest.fixture(scope="session")
def model_dir_factory():
    """sglang_model_dir, as a fixture (test modules cannot import this conftest by name)."""
    return sglang_model_dir


def schedule_argv(backend: str, tokenizer, seed, request_rate, num_prompts) -> list[str]:
    """The arguments a load generator's CLI needs to draw the schedule of `num_prompts` requests at
    `request_rate` from `seed`, aimed at a closed port (the schedule tests stop it before its first
    request); the caller adds the dataset's flags."""
    return [
        "--backend",
        backend,
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--tokenizer",
        str(tokenizer),
        "--ready-check-timeout-sec",
        "0",
        "--num-prompts",
        str(num_prompts),
        "--request-rate",
        str(request_rate),
        "--seed",
        str(seed),
    ]


def run_schedule_oracle(python, script: Path, cases: list, work: Path, timeout: float = 300) -> list:
    """The row the oracle `script` prints for each case (a load generator's argv, see schedule_argv)."""
    (work / "cases.json").write_text(json.dumps(cases))
    proc = run_oracle(python, [script, work / "cases.json"], timeout=timeout, cwd=work)
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(rows) == len(cases)
    return rows


VLLM_SH = REPO / "ci" / "vllm.sh"
VLLM_VENV = REPO / ".venv" / "vllm"
VLLM_HOW = "Build it with `ci/vllm.sh .venv/vllm` (needs PyPI; see docs/vllm.md)."


def vllm_env(extra: dict | None = None) -> dict:
    """The pinned vLLM's environment: offline, no usage stats, unbuffered, nothing of ours on its path."""
    offline = {
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return isolated_env(offline, extra)


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """.venv/vllm, built (or found up to date) by ci/vllm.sh once per session, for every test that
    runs the pinned vLLM's own code."""
    try:
        proc = run_captured([str(VLLM_SH), str(VLLM_VENV)], vllm_env(), 1800, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"ci/vllm.sh ran past 1800 s:\n{tail(str(e.stdout))}\n{tail(str(e.stderr))}\n{VLLM_HOW}")
    if proc.returncode != 0:
        pytest.fail(
            f"ci/vllm.sh .venv/vllm exited {proc.returncode}:\n{tail(proc.stdout)}\n{tail(proc.stderr)}\n{VLLM_HOW}",
            pytrace=False,
        )
    for exe in ("python", "vllm"):
        if not os.access(VLLM_VENV / "bin" / exe, os.X_OK):
            pytest.fail(f"{VLLM_VENV}/bin/{exe} is missing after ci/vllm.sh. {VLLM_HOW}", pytrace=False)
    return VLLM_VENV
