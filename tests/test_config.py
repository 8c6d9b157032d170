"""Per-repository configuration: sources, defaults, and errors that say where and what to do."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import jsonschema
import pytest

from pytpu.engine import config
from pytpu.engine.config import (
    KEYS,
    SCHEMA,
    SCHEMA_PATH,
    Config,
    ConfigError,
    Program,
    load,
    program_option,
)
from tests.source_tree import ROOT


def write(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def yaml_error(root: Path, text: str) -> str:
    write(root, ".github/pytpu.yml", text)
    with pytest.raises(ConfigError) as info:
        load(root)
    return str(info.value)


def test_defaults_without_files(tmp_path):
    write(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')  # no [tool.pytpu]
    loaded = load(tmp_path)
    assert loaded == Config()
    assert loaded.source is None
    assert loaded.tests == "tests/pytpu" and loaded.tolerance == 1.0 and loaded.timeout == 300.0
    assert loaded.selects("any/file.py")


def test_the_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA_PATH.read_text("utf-8")))
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_every_key_the_code_reads_is_in_the_schema():
    bookkeeping = {"source", "given", "target_source"}
    read = {field.name for field in dataclasses.fields(Config)} - bookkeeping
    assert read == set(SCHEMA["properties"]) == set(KEYS) == set(config._VALUES)
    assert set(KEYS) | bookkeeping == set(Config().as_dict())
    assert all(KEYS.values()), "every key is documented (its `description`)"
    # a program's mapping holds Program's fields; `name: command` is any other single key
    program = SCHEMA["$defs"]["program"]["anyOf"]
    assert set(config._PROGRAM_KEYS) == {field.name for field in dataclasses.fields(Program)}
    named = [form for form in program if "maxProperties" in form][0]
    assert {k for option in named["not"]["anyOf"] for k in option["required"]} == set(
        config._PROGRAM_KEYS
    )


def test_every_key_s_schema_says_what_it_must_be():
    for key, spec in SCHEMA["properties"].items():
        told = spec if "$ref" not in spec else {**config._resolve(spec["$ref"]), **spec}
        assert "must" in told.get("errorMessage", ""), key


def _schemas(schema):
    """Every schema within `schema`, itself first."""
    if isinstance(schema, dict):
        yield schema
        for key, value in schema.items():
            if key not in ("examples", "default", "enum", "const"):
                yield from _schemas(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _schemas(value)


def test_the_schema_s_examples_and_defaults_are_valid():
    # (the examples go into the error messages; a wrong one would mislead)
    checked = 0
    for schema in _schemas(SCHEMA):
        for example in [
            *schema.get("examples", ()),
            *([schema["default"]] if "default" in schema else []),
        ]:
            assert config._VALIDATOR.evolve(schema=schema).is_valid(example), (schema, example)
            checked += 1
    assert checked > 10


def test_the_schema_s_defaults_are_the_code_s():
    defaults = Config().as_dict()
    for key, spec in SCHEMA["properties"].items():
        if "default" in spec:
            assert spec["default"] == defaults[key], key


@pytest.mark.parametrize("name", [".github/pytpu.yml", ".github/pytpu.yaml"])
def test_yaml_values_are_read(tmp_path, name):
    write(
        tmp_path,
        name,
        """\
        include: ["src/"]
        exclude: ["src/vendor/"]
        run: python train.py --steps 2
        benchmark: python bench.py
        tolerance: 2
        baseline_device: cuda
        target: torch_xla==2.9
        tests: checks/tpu/
        timeout: 60
        benchmark_rounds: 7
        virtual_devices: 4
        data_parallel: spmd
        precision: bf16
        batch: per_device
        """,
    )
    loaded = load(tmp_path)
    assert loaded.as_dict() == {
        "include": ["src/"],
        "exclude": ["src/vendor/"],
        "run": [{"command": "python train.py --steps 2", "name": None, "benchmark": None}],
        "benchmark": "python bench.py",
        "tolerance": 2.0,
        "baseline_device": "cuda",
        "target": "torch_xla==2.9",
        "tests": "checks/tpu",
        "timeout": 60.0,
        "benchmark_rounds": 7,
        "virtual_devices": 4,
        "data_parallel": "spmd",
        "precision": "bf16",
        "batch": "per_device",
        "requirements": None,
        "setup": [],
        "source": name,
        "given": [
            "include",
            "exclude",
            "run",
            "benchmark",
            "tolerance",
            "baseline_device",
            "target",
            "tests",
            "timeout",
            "benchmark_rounds",
            "virtual_devices",
            "data_parallel",
            "precision",
            "batch",
        ],
        "target_source": None,
    }
    assert isinstance(loaded.tolerance, float)


def test_data_parallel_auto_is_spmd_with_several_devices(monkeypatch):
    def parallel(settings: Config) -> str:
        return settings.rule_settings["data_parallel"]

    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert parallel(Config()) == "none"
    monkeypatch.setenv("PJRT_DEVICE", "TPU")  # a TPU runner: its chips, counted at run time
    assert parallel(Config()) == "spmd"
    monkeypatch.setenv("PJRT_DEVICE", "CPU")
    assert parallel(Config(virtual_devices=4)) == "spmd"
    assert parallel(Config(virtual_devices=4, data_parallel="none")) == "none"
    assert parallel(Config(data_parallel="spmd")) == "spmd"


def test_precision_chooses_rules(monkeypatch):
    monkeypatch.delenv("PJRT_DEVICE", raising=False)
    assert Config().rule_settings == {
        "data_parallel": "none",
        "precision": "fp32",
        "batch": "global",
    }
    assert Config(precision="bf16").rule_settings["precision"] == "bf16"


def test_empty_yaml_gives_defaults(tmp_path):
    write(tmp_path, ".github/pytpu.yml", "# nothing yet\n")
    assert load(tmp_path) == Config(source=".github/pytpu.yml")


def test_pyproject_table_is_read(tmp_path):
    write(
        tmp_path,
        "pyproject.toml",
        """\
        [project]
        name = "x"

        [tool.pytpu]
        run = "python main.py"
        exclude = ["docs/"]
        tolerance = 1.5
        """,
    )
    loaded = load(tmp_path)
    assert loaded.source == "pyproject.toml"
    assert loaded.run == (Program("python main.py"),)
    assert loaded.benchmark_command == "python main.py"  # benchmark falls back to run
    assert loaded.exclude == ("docs/",)
    assert loaded.tolerance == 1.5


def test_both_sources_are_an_error_naming_both(tmp_path):
    write(tmp_path, ".github/pytpu.yml", "run: python a.py\n")
    write(tmp_path, "pyproject.toml", '[tool.pytpu]\nrun = "python b.py"\n')
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    message = str(info.value)
    assert ".github/pytpu.yml" in message and "pyproject.toml" in message
    assert "keep one" in message and "remove the [tool.pytpu] table" in message


def test_two_yaml_files_are_an_error_naming_both(tmp_path):
    write(tmp_path, ".github/pytpu.yml", "run: a\n")
    write(tmp_path, ".github/pytpu.yaml", "run: b\n")
    with pytest.raises(ConfigError, match=r"pytpu\.yml.*pytpu\.yaml"):
        load(tmp_path)


def test_unknown_yaml_key_names_key_file_line_and_close_key(tmp_path):
    message = yaml_error(tmp_path, "run: python a.py\n\nbenchmarks: python b.py\n")
    assert message.startswith(".github/pytpu.yml:3:")
    assert "`benchmarks`" in message
    assert "did you mean `benchmark`?" in message


def test_unknown_key_without_close_match_lists_known_keys(tmp_path):
    message = yaml_error(tmp_path, "zzz: 1\n")
    assert "`zzz`" in message and "known keys:" in message and "baseline_device" in message


def test_unknown_pyproject_key_names_table_key_and_line(tmp_path):
    write(
        tmp_path,
        "pyproject.toml",
        '[tool.other]\ntimeouts = 1\n\n[tool.pytpu]\nrun = "x"\ntimeouts = 5\n',
    )
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    message = str(info.value)
    assert message.startswith("pyproject.toml:6 [tool.pytpu]:")
    assert "`timeouts`" in message and "did you mean `timeout`?" in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('tolerance: "x"', "tolerance"),
        ("tolerance: -1", "tolerance"),
        ("tolerance: true", "tolerance"),
        ("timeout: 0", "timeout"),
        ("include: src/", "include"),
        ("exclude: [1]", "exclude"),
        ("exclude: ['!']", "exclude"),
        ("baseline_device: tpu", "baseline_device"),
        ("target: jax", "target"),
        ("target: torch_xla==not-a-version", "target"),
        ("run: [python, a.py]", "run"),
        ("benchmark: ''", "benchmark"),
    ],
)
def test_bad_values_name_the_key_and_line(tmp_path, text, key):
    message = yaml_error(tmp_path, f"run: python a.py\n{text}\n")
    assert message.startswith(f".github/pytpu.yml:2: `{key}` ")


def test_bad_pyproject_value_names_the_key(tmp_path):
    write(tmp_path, "pyproject.toml", '[tool.pytpu]\nbaseline_device = "tpu"\n')
    with pytest.raises(ConfigError, match=r"^pyproject\.toml:2 \[tool\.pytpu\]: `baseline_device`"):
        load(tmp_path)


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    message = yaml_error(tmp_path, "run: python a.py\ninclude: [src/\nexclude: []\n")
    assert message.startswith(".github/pytpu.yml:3: not valid YAML")


def test_duplicate_yaml_key_is_an_error(tmp_path):
    message = yaml_error(tmp_path, "run: a\nrun: b\n")
    assert message.startswith(".github/pytpu.yml:2:") and "`run`" in message and ":1" in message


def test_top_level_must_be_a_mapping(tmp_path):
    message = yaml_error(tmp_path, "- run\n- python a.py\n")
    assert message.startswith(".github/pytpu.yml:1:") and "mapping" in message


def test_yaml_is_loaded_safely(tmp_path):
    message = yaml_error(tmp_path, "run: !!python/object/apply:os.system ['true']\n")
    assert "not valid YAML" in message


def test_invalid_pyproject_is_an_error(tmp_path):
    write(tmp_path, "pyproject.toml", "[tool.pytpu\n")
    with pytest.raises(ConfigError, match=r"^pyproject\.toml: not valid TOML"):
        load(tmp_path)


@pytest.mark.parametrize("tests", ["../x", "a/../../x", "/abs/tests", "C:\\tests", ".", ""])
def test_tests_folder_must_stay_inside_the_repository(tmp_path, tests):
    message = yaml_error(tmp_path, f"tests: '{tests}'\n")
    assert message.startswith(".github/pytpu.yml:1: `tests` ")


def test_tests_folder_inside_is_normalised(tmp_path):
    write(tmp_path, ".github/pytpu.yml", "tests: ./a/../suite/\n")
    assert load(tmp_path).tests == "suite"


def test_selects_applies_include_then_exclude():
    chosen = Config(include=("src/", "*.py"), exclude=("src/vendor/", "test_*.py"))
    assert chosen.selects("src/model.py")
    assert chosen.selects("src/data/readme.txt")
    assert chosen.selects("train.py")
    assert not chosen.selects("docs/readme.txt")  # not included
    assert not chosen.selects("src/vendor/lib.py")  # excluded under an included folder
    assert not chosen.selects("tests/test_model.py")  # excluded by name


def test_selects_everything_by_default_except_excluded():
    assert Config().selects("a/b/c.py")
    assert not Config(exclude=("build/",)).selects("build/x.py")
    assert Config(exclude=("build/",)).selects("src/build.py")


def test_several_programs_are_read(tmp_path):
    write(
        tmp_path,
        ".github/pytpu.yml",
        """\
        run:
          - python single_gpu.py 2 1
          - train: python train.py --max-iters 5
          - name: sample
            command: python sample.py --num-samples 1
            benchmark: python sample.py --num-samples 20
        """,
    )
    loaded = load(tmp_path)
    assert loaded.run == (
        Program("python single_gpu.py 2 1"),
        Program("python train.py --max-iters 5", "train"),
        Program("python sample.py --num-samples 1", "sample", "python sample.py --num-samples 20"),
    )
    assert loaded.benchmark_command is None  # each program has its own


@pytest.mark.parametrize(
    "text, expected",
    [
        ("run:\n  - train: python a.py\n  - train: python b.py\n", "names train more than once"),
        ("run: []\n", "`run` must list the programs' commands (or leave `run` out), not []"),
        ("run:\n  - {name: x, cmd: python a.py}\n", "item 1 must be a command"),
        (
            "run:\n  - {name: 'a b', command: python a.py}\n",
            "`run` item 1 `name` must be letters, digits, `_`, `.` or `-` (it names the "
            "program's folder of tests), not 'a b'; e.g. train",
        ),
        ("run:\n  - {'a b': python a.py}\n", "item 1: the name 'a b' must be letters"),
        ("run: [python a.py, python b.py]\nbenchmark: python c.py\n", "each program its own"),
    ],
)
def test_bad_program_lists_say_what_to_do(tmp_path, text, expected):
    message = yaml_error(tmp_path, text)
    assert ".github/pytpu.yml:" in message and expected in message, message


def test_the_command_line_form_of_a_program():
    assert program_option("train: python train.py") == Program("python train.py", "train")
    assert program_option("PYTHONPATH=. python t.py") == Program("PYTHONPATH=. python t.py")


def test_the_actions_target_input_applies_where_the_settings_set_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTPU_TARGET", "torch_tpu")
    loaded = load(tmp_path)
    assert (loaded.target, loaded.target_source) == ("torch_tpu", "PYTPU_TARGET")
    write(tmp_path, ".github/pytpu.yml", "target: torch_xla\n")
    loaded = load(tmp_path)
    assert (loaded.target, loaded.target_source) == ("torch_xla", None)
    monkeypatch.setenv("PYTPU_TARGET", "torch_gpu")
    (tmp_path / ".github" / "pytpu.yml").unlink()
    with pytest.raises(ConfigError, match="PYTPU_TARGET: `target` is not a valid target"):
        load(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "include: [src/]\n\ntolerance: .nan\n",
            ".github/pytpu.yml:3: `tolerance` must be a number greater than 0, not nan; e.g. 2.0",
        ),
        (
            "run:\n  - python a.py\n  - train: ''\n",
            ".github/pytpu.yml:1: `run` item 2 `train` must be a shell command (a string), "
            "not ''; e.g. python train.py",
        ),
        (
            "run:\n  - {command: python a.py, benchmark: 3}\n",
            ".github/pytpu.yml:1: `run` item 1 `benchmark` must be a shell command (a string), "
            "not 3; e.g. python train.py",
        ),
        (
            # a named program without its command (read as a program with none before)
            "run:\n  - train:\n",
            ".github/pytpu.yml:1: `run` item 1 `train` must be a shell command (a string), "
            "not None; e.g. python train.py",
        ),
        (
            "exclude: [build/]\nsetup: []\n",
            ".github/pytpu.yml:2: `setup` must be a shell command or a list of them, not []; "
            'e.g. ["pip install ./vendor/ops"]',
        ),
        (
            "tests: 2020-01-01\n",
            ".github/pytpu.yml:1: `tests` must be a folder path (a string), not "
            "datetime.date(2020, 1, 1); e.g. tests/pytpu",
        ),
        (
            "\n- run: python a.py\n",
            ".github/pytpu.yml:2: the top level must be a mapping of settings, not "
            "[{'run': 'python a.py'}]; write `key: value` lines; known keys: include, exclude",
        ),
        (
            "virtual_devices: 0\n",
            ".github/pytpu.yml:1: `virtual_devices` must be a whole number of devices, 1 to 64,"
            " not 0; e.g. 4",
        ),
        (
            "data_parallel: ddp\n",
            ".github/pytpu.yml:1: `data_parallel` must be one of auto, spmd, none, not 'ddp'",
        ),
        (
            "precision: fp16\n",
            ".github/pytpu.yml:1: `precision` must be one of fp32, bf16, not 'fp16'",
        ),
        # the first problem in the file's order, whether the schema or the code finds it
        ("tests: '..'\ntolerance: -1\n", ".github/pytpu.yml:1: `tests` must be a folder inside"),
        ("tolerance: -1\ntests: '..'\n", ".github/pytpu.yml:1: `tolerance` must be a number"),
        ("timeouts: 1\ntolerance: -1\n", ".github/pytpu.yml:1: unknown key `timeouts`; did you"),
    ],
)
def test_invalid_settings_name_file_line_and_what_to_do(tmp_path, text, expected):
    assert yaml_error(tmp_path, text).startswith(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '[tool.pytpu]\nrun = ["python a.py", {name = "a b", command = "x"}]\n',
            "pyproject.toml:2 [tool.pytpu]: `run` item 2 `name` must be letters",
        ),
        (
            '[tool.pytpu]\ntests = "t"\ntimeout = inf\n',
            "pyproject.toml:3 [tool.pytpu]: `timeout` must be a number greater than 0, not inf; "
            "e.g. 600",
        ),
        (
            "[tool]\npytpu = 1\n",
            "pyproject.toml: `tool.pytpu` must be a mapping of settings, not 1; write "
            "[tool.pytpu] followed by `key = value` lines",
        ),
    ],
)
def test_invalid_pyproject_settings_name_file_line_and_what_to_do(tmp_path, text, expected):
    write(tmp_path, "pyproject.toml", text)
    with pytest.raises(ConfigError) as info:
        load(tmp_path)
    assert str(info.value).startswith(expected)


def test_a_blank_command_line_program_is_an_error():
    with pytest.raises(ValueError, match=r"^`--run` must be a shell command \(a string\), not ' '"):
        program_option(" ")
    assert program_option("a b: c") == Program("a b: c")  # not a name: all of it is the command


def test_the_readme_s_example_settings_are_valid(tmp_path):
    readme = (ROOT / "README.md").read_text("utf-8")
    after = readme.split("Configuration, in `.github/pytpu.yml`", 1)[1]
    example = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    write(tmp_path, ".github/pytpu.yml", example)
    assert set(load(tmp_path).given) == set(KEYS)  # every key, each valid
