"""What ansible-doc shows is what the code does: each module's DOCUMENTATION options against the
argument_spec it hands AnsibleModule (names, types, defaults, required, choices, elements), and each
filter's YAML doc (filter_plugins/<filter>.yml, which ansible-doc -t filter reads) against the filter's
own parameters."""

from __future__ import annotations

import importlib.util
import inspect
import sys

import pytest
import yaml

MODULES = sorted(
    p.stem for p in (__import__("pathlib").Path(__file__).resolve().parents[2] / "library").glob("*.py")
)


class _Spec(Exception):
    def __init__(self, kwargs):
        super().__init__("argument_spec captured")
        self.kwargs = kwargs


class _Capture:
    """AnsibleModule that stops at its constructor with the arguments main() gave it."""

    def __init__(self, **kwargs):
        raise _Spec(kwargs)


@pytest.fixture(scope="module")
def module_utils_as_ansible(repo):
    # the modules import the library as ansible.module_utils.sglang_layouts (ansible.cfg's module_utils)
    import ansible.module_utils

    path = str(repo / "module_utils")
    if path not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(path)


def _load(repo, name):
    spec = importlib.util.spec_from_file_location(f"_doc_check_{name}", repo / "library" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _argument_spec(mod) -> dict:
    mod.AnsibleModule = _Capture
    with pytest.raises(_Spec) as caught:
        mod.main()
    return caught.value.kwargs["argument_spec"]


def _compare(doc_opts: dict, spec: dict, where: str) -> list[str]:
    problems = []
    if set(doc_opts) != set(spec):
        problems.append(
            f"{where}: documented only {sorted(set(doc_opts) - set(spec))}, in the spec only "
            f"{sorted(set(spec) - set(doc_opts))}"
        )
    for name in sorted(set(doc_opts) & set(spec)):
        doc, arg = doc_opts[name] or {}, spec[name] or {}
        for key, missing in (
            ("type", "str"),
            ("default", None),
            ("required", False),
            ("choices", None),
            ("elements", None),
        ):
            d, a = doc.get(key, missing), arg.get(key, missing)
            if key == "choices" and d is not None and a is not None:
                d, a = list(d), list(a)
            if d != a:
                problems.append(
                    f"{where}.{name}: {key} is {d!r} in DOCUMENTATION, {a!r} in the argument_spec"
                )
        if doc.get("suboptions") or arg.get("options"):
            problems += _compare(doc.get("suboptions") or {}, arg.get("options") or {}, f"{where}.{name}")
    return problems


@pytest.mark.parametrize("name", MODULES)
def test_module_documentation_is_its_argument_spec(repo, module_utils_as_ansible, name):
    mod = _load(repo, name)
    doc = yaml.safe_load(mod.DOCUMENTATION)
    assert doc["module"] == name
    for part in ("EXAMPLES", "RETURN"):
        assert getattr(mod, part).strip(), f"{name} has no {part}"
    assert _compare(doc.get("options") or {}, _argument_spec(mod), name) == []


def test_the_check_finds_a_wrong_default(repo, module_utils_as_ansible):
    mod = _load(repo, "sglang_write_files")
    spec = _argument_spec(mod)
    doc = yaml.safe_load(mod.DOCUMENTATION)["options"]
    name = sorted(spec)[0]
    wrong = {**doc, name: {**doc[name], "default": "not the default", "type": "raw"}}
    problems = _compare(wrong, spec, "sglang_write_files")
    assert len(problems) == 2 and all(f"sglang_write_files.{name}" in p for p in problems)
    assert _compare({k: v for k, v in doc.items() if k != name}, spec, "m")[0].startswith(
        "m: documented only"
    )


def _filters(repo):
    spec = importlib.util.spec_from_file_location(
        "_doc_check_filters", repo / "filter_plugins" / "sglang_layouts.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _listed(value) -> list:
    return list(value) if isinstance(value, list) else [value] if value is not None else []


def test_every_filter_has_its_documentation_and_its_parameters(repo):
    mod = _filters(repo)
    filters = mod.FilterModule().filters()
    sidecars = {p.stem for p in (repo / "filter_plugins").glob("*.yml")}
    assert sidecars == set(filters)
    sys.path.insert(0, str(repo / "module_utils"))
    for name, face in filters.items():
        doc = yaml.safe_load((repo / "filter_plugins" / f"{name}.yml").read_text())
        body = doc["DOCUMENTATION"]
        assert body["name"] == name and body["short_description"] and body["description"]
        assert "_input" in body["options"] and doc["RETURN"]["_value"]["description"]
        assert f"sglang.layouts.{name}" in doc["EXAMPLES"]
        # ansible-doc renders only text: an unquoted "key: value" in a description is read as a dict
        texts = [
            body["short_description"],
            *_listed(body["description"]),
            *_listed(doc["RETURN"]["_value"]["description"]),
        ]
        texts += [t for o in body["options"].values() for t in _listed(o.get("description"))]
        assert all(isinstance(t, str) for t in texts), (name, [t for t in texts if not isinstance(t, str)])
        # the function behind the filter: its parameters after the piped value are the documented options
        fn = mod._FACES[name][0] if name in mod._FACES else face
        fn = mod._library(fn) if isinstance(fn, str) else fn
        params = list(inspect.signature(fn).parameters)[1:]
        documented = [o for o in body["options"] if o != "_input"]
        assert documented == params, name
        assert (body.get("positional") or "").replace(" ", "").split(",") == (params or [""]), name
        required = [o for o in documented if body["options"][o].get("required")]
        without_default = [
            p for p in params if inspect.signature(fn).parameters[p].default is inspect.Parameter.empty
        ]
        assert required == without_default, name
