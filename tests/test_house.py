"""House rules, checked: lint, format and types, modules that fit in one head, an import
graph without cycles whose edges point down the data path's layers, the modules that run
under bare interpreters import nothing but the standard library, declared dependencies are
the imported ones, and the record types match their documentation."""

import ast
import re
import shutil
import subprocess
import sys
import tomllib
import typing
from pathlib import Path

import pytest
from fixtures.paths import ROOT
from import_graph import cycles, edges, nodes

from servesweep import records

PACKAGE = ROOT / "servesweep"
# A module fits in one head: at most MAX_MODULE_LINES lines. The cap serves the head, so a
# cohesive unit is not split to fit it: a longer module is named here with its reason (and
# its own cap, so it does not grow unnoticed). docs/design.md states the same rule.
MAX_MODULE_LINES = 500
LONGER_MODULES: dict[str, tuple[int, str]] = {  # "servesweep/x.py": (cap, why)
    "servesweep/stats.py": (
        750,
        "the one statistical core: the verdicts' maths and the variance components that "
        "size what they cost (issue 35), read together",
    ),
}

# The package's layers along the data path, lowest first (docs/design.md, "Import layers"):
# a node (a top-level module or subpackage, tests/import_graph.py) may import its own layer
# and those below, never one above. The sweep stands on the engine adapters and the
# resources (a cell's spec holds the server's command; the plan names the stacks'
# interpreters), so server/ and resources/ sit below it although they run after it.
LAYERS = [
    # shared by all
    ("servesweep", "jsonfile", "joblog", "level", "sizing", "records", "fmt", "stats"),
    ("hunt",),  # the hunt's decisions: maths on numbers, no files
    ("server", "server/engines"),  # one server process, and how each engine is driven
    ("resources",),  # stacks and models
    ("workloads",),  # prompts by kind, and each kind's keys (the sweep's checks read them)
    ("sweep",),  # the config, its cells and specs, the plan
    ("bench",),  # the client: one level against a live server
    ("correctness", "capacity"),  # the passes a boot runs after its levels
    ("run",),  # one boot of one cell
    ("results", "results/collect"),  # records -> summary.csv
    ("results/judge",),  # summary -> verdicts.csv
    ("results/report",),  # -> report.html
    ("hunt_run",),  # the hunt through the workflow: its boots' records, its steps, its plan
]

# Run by the stack's own interpreter, a worker process or a detached watchdog: they must
# import with the standard library alone.
BARE_MODULES = [
    "servesweep.bench.worker",
    "servesweep.bench.http1",
    "servesweep.bench.sse",
    "servesweep.bench.messages",
    "servesweep.bench.rate_phase",
    "servesweep.server.watchdog",
    "servesweep.server.procs",
    "servesweep.resources.stack_probe",
]

# Distribution name -> the module it provides, where they differ.
MODULE_OF = {"pyyaml": "yaml", "nvidia-ml-py": "pynvml", "huggingface_hub": "huggingface_hub"}
# Declared for the user's command line, not imported by the package.
NOT_IMPORTED = {"snakemake"}


def ruff(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    return subprocess.run([exe, *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_ruff_check_is_clean():
    result = ruff("check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean():
    result = ruff("format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    # pyproject.toml's [tool.mypy]: servesweep/, strict where stages meet; its cache
    # (.mypy_cache) keeps a second run to a few seconds.
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_a_module_fits_in_one_head(path):
    lines = len(path.read_text().splitlines())
    name = str(path.relative_to(ROOT))
    cap, why = LONGER_MODULES.get(name, (MAX_MODULE_LINES, ""))
    assert lines <= cap, f"{name}: {lines} lines (cap {cap}{': ' + why if why else ''})"


def test_longer_modules_are_still_longer():
    for name, (cap, why) in LONGER_MODULES.items():
        lines = len((ROOT / name).read_text().splitlines())
        assert cap > MAX_MODULE_LINES and why, name
        assert lines > MAX_MODULE_LINES, f"{name}: {lines} lines, drop its exception"


def test_no_import_cycles():
    found = cycles(nodes(PACKAGE), edges(PACKAGE))
    assert not found, f"import cycles between package nodes: {found}"


def test_no_import_cycles_between_top_level_packages():
    # As the house is drawn, one box a top-level package: a subpackage's imports are its
    # package's (so the hunt's workflow parts cannot sit inside the pure hunt/ it stands on).
    top = {(a.split("/")[0], b.split("/")[0]): d for (a, b), d in edges(PACKAGE).items()}
    top = {(a, b): d for (a, b), d in top.items() if a != b}
    found = cycles({n.split("/")[0] for n in nodes(PACKAGE)}, top)
    assert not found, f"import cycles between top-level packages: {found}"


def test_imports_point_down_the_layers():
    rank = {node: i for i, layer in enumerate(LAYERS) for node in layer}
    unplaced = nodes(PACKAGE) - set(rank)
    assert not unplaced, f"place {sorted(unplaced)} in tests/test_house.py LAYERS"
    up = sorted(
        f"{a} -> {b}" + (" (deferred)" if deferred else "")
        for (a, b), deferred in edges(PACKAGE).items()
        if rank[b] > rank[a]
    )
    assert not up, f"imports pointing up the layers: {up}"


def test_the_import_graph_sees_every_kind_of_import(tmp_path):
    # A cycle made only by a deferred import (inside a function, or type-only) still counts.
    package = tmp_path / "servesweep"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from servesweep.high import X\n"
    )
    (package / "high.py").write_text("def f():\n    from servesweep.low import a\n")
    (package / "other.py").write_text("from servesweep import high\n")
    graph = edges(package)
    assert graph == {("low", "high"): True, ("high", "low"): True, ("other", "high"): False}
    assert cycles(nodes(package), graph) == [["high", "low"]]


def test_bare_modules_import_with_the_standard_library_alone():
    # -S: no site-packages at all, so a third-party import fails loudly.
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import importlib\n"
        f"for name in {BARE_MODULES!r}: importlib.import_module(name)\n"
        "outside = sorted({m.split('.')[0] for m in sys.modules}\n"
        "    - set(sys.stdlib_module_names) - {'servesweep', '__main__'})\n"
        "print(outside)\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout


def third_party_imports() -> dict[str, set[str]]:
    """Top-level third-party modules imported by the package and the scripts."""
    found: dict[str, set[str]] = {}
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "servesweep":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(specs):
        return {re.split(r"[<>=;\[ ]", spec, maxsplit=1)[0].strip().lower() for spec in specs}

    optional = set()
    for extra, specs in project["optional-dependencies"].items():
        if extra != "dev":
            optional |= names(specs)
    return names(project["dependencies"]), optional


def test_dependencies_are_the_imported_packages():
    imported = third_party_imports()
    required, optional = declared()
    modules = {MODULE_OF.get(d, d) for d in required | optional}
    # Every import is declared (torch is probed inside a stack, never installed here).
    undeclared = set(imported) - modules - {"torch"}
    assert not undeclared, {m: imported[m] for m in undeclared}
    # Every runtime dependency is imported somewhere.
    unused = {d for d in required - NOT_IMPORTED if MODULE_OF.get(d, d) not in imported}
    assert not unused, unused


def documented_fields(heading: str) -> set[str]:
    """The backticked field names in the first column of a docs/records.md table."""
    text = (ROOT / "docs" / "records.md").read_text()
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    fields: set[str] = set()
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first = line.split("|")[1]
        for name in re.findall(r"`([^`]+)`", first):
            brace = re.fullmatch(r"\{([\w,]+)\}_\{([\w,]+)\}_ms", name)
            if brace:
                stats, metrics = brace.group(1).split(","), brace.group(2).split(",")
                fields |= {f"{s}_{m}_ms" for s in stats for m in metrics}
            else:
                fields.add(name)
    return fields


@pytest.mark.parametrize(
    "heading, record",
    [
        ("Stack manifest", records.StackManifest),
        ("Model manifest", records.ModelManifest),
        ("Cell result", records.CellRecord),
        ("Level summary", records.LevelSummary),
        ("Request records", records.RequestRecord),
        ("Summary table", records.LevelJudgement),
    ],
)
def test_record_types_are_the_documented_records(heading, record):
    assert set(typing.get_type_hints(record)) == documented_fields(heading)


def test_the_hunt_record_type_is_the_documented_hunt_json():
    from servesweep.hunt.record import HuntRecord

    documented = documented_fields("Hunt — `results/hunt/hunt.json`")
    assert set(typing.get_type_hints(HuntRecord)) == documented


def test_verdict_columns_are_the_documented_columns():
    # verdicts.csv: the Comparison's fields, and the stage columns collect adds under
    # benchmark.repeats: auto.
    from servesweep.results.judge.verdicts import Comparison

    documented = documented_fields("Verdicts")
    assert set(Comparison._fields) | {"stage_look", "stage_outcome"} == documented


def test_first_boot_columns_are_the_documented_columns():
    from servesweep.results.judge.board import FIRST_BOOT_COLUMNS

    assert set(FIRST_BOOT_COLUMNS) == documented_fields("First boots")


def test_the_summary_columns_are_the_record_types():
    # summary.csv's fixed columns come from servesweep.records (one declaration): the cell's
    # (named in the Summary table's prose), every one a column of a record or collect's.
    from servesweep.results.collect.cells import CELL_COLUMNS, LEVEL_FIELDS, STACK_FIELDS

    prose = (ROOT / "docs" / "records.md").read_text().split("## Summary table", 1)[1]
    named = prose.split("Columns: `", 1)[1].split("`", 1)[0]
    assert " ".join(named.split()) == ", ".join(CELL_COLUMNS)
    level = set(typing.get_type_hints(records.LevelSummary))
    judged = set(typing.get_type_hints(records.LevelJudgement))
    assert set(LEVEL_FIELDS) <= level | judged and len(set(LEVEL_FIELDS)) == len(LEVEL_FIELDS)
    assert set(STACK_FIELDS) <= set(typing.get_type_hints(records.StackManifest))


# Where the docs, the rules and the config guide send a reader: every `servesweep/…` path
# they name exists (a move that leaves one behind fails here).
POINTER_FILES = [
    ROOT / "Snakefile",
    ROOT / "README.md",
    ROOT / "config" / "README.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "tests" / "README.md",
    *sorted((ROOT / "rules").glob("*.smk")),
    *sorted((ROOT / "docs").glob("*.md")),
]


@pytest.mark.parametrize("path", POINTER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_path_a_reader_is_sent_to_exists(path):
    named = re.findall(r"servesweep/[\w./-]*\w", path.read_text())
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, f"{path.relative_to(ROOT)} names {missing}"


# `benchmarks/…` paths the docs name that are not in the tree, each with why.
BENCHMARK_PATHS_GONE = {
    # docs/vllm-h200.md's earlier runs, named as their history: replaced by benchmarks/gpu/.
    "benchmarks/vllm_wheels.sh": "replaced by benchmarks/gpu/prepare.sh",
    "benchmarks/vllm_run.sh": "replaced by benchmarks/gpu/run.sh",
    "benchmarks/vllm_parity.sh": "replaced by benchmarks/gpu/run.sh parity",
    "benchmarks/results/vllm_parity.json": "a run's output on the H200, not committed",
}


@pytest.mark.parametrize("path", POINTER_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_benchmark_path_a_reader_is_sent_to_exists(path):
    # Not a path inside another tree (`vllm/benchmarks/...` in a wheel, `tests/benchmarks/`).
    named = re.findall(r"(?<![\w./-])benchmarks/[\w./-]*\w", path.read_text())
    missing = sorted(
        {p for p in named if not (ROOT / p).exists() and p not in BENCHMARK_PATHS_GONE}
    )
    assert not missing, f"{path.relative_to(ROOT)} names {missing}"


def test_no_issue_numbers_in_code():
    """Code says what it does, not which ticket it came from (the docs keep that history)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "rules").glob("*.smk")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bissue \d+|\bhouse\d\b", line, re.I):
                found.append(f"{path.relative_to(ROOT)}:{n}")
    assert not found, found
