"""README.md and docs/ say only what the code does, where a machine can tell.

Driven by the documents, not by a list kept here: every `horae …` command line they show
(in code spans and in sh blocks) names commands that exist and flags those commands take;
every `HORAE_*` variable they name is read somewhere, and every one Horae reads is named
in them; every metric (and label) they name is defined in `horae/metrics.py`.
"""

from __future__ import annotations

import ast
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from prometheus_client.metrics import MetricWrapperBase
from typer.testing import CliRunner

from horae import metrics
from horae.cli import app

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Shown:
    """A piece of a document: where it is (`file:line`) and its text."""

    where: str
    text: str


def _where(path: Path, text: str, offset: int) -> str:
    return f"{path.relative_to(REPO)}:{text.count(chr(10), 0, offset) + 1}"


FENCE = re.compile(r"^ *```([^\n`]*)\n(.*?)^ *```", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
SHELL = {"sh", "bash", "shell", "console"}


def code(path: Path) -> tuple[list[Shown], list[Shown]]:
    """The code spans of a Markdown file, and the lines of its shell blocks."""
    text = path.read_text()
    spans, lines = [], []
    for block in FENCE.finditer(text):
        if block.group(1).strip() not in SHELL:
            continue
        body = block.group(2).replace("\\\n", "  ")  # continued lines: one command
        start = block.start(2)
        for line in body.split("\n"):
            lines.append(Shown(_where(path, text, start), line))
            start += len(line) + 1
    # Spans outside the blocks (blanked, so that offsets and line numbers hold); a span
    # never crosses a blank line.
    prose = FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    for span in SPAN.finditer(prose):
        if "\n\n" not in span.group(1):
            spans.append(Shown(_where(path, text, span.start()), span.group(1)))
    return spans, lines


# ---------------------------------------------------------------------------- commands

# `horae` as the command word: first (after a prompt, VAR=value words or a path such as
# `.venv/bin/`), or after `--` (`kubectl exec … -- horae migrate`); not `helm install horae`.
COMMAND = re.compile(
    r"(?:^\s*|\s--\s+)(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:[^\s`]*/)?horae\s+(.*)", re.DOTALL
)
SHELL_END = re.compile(r"\s#|\s\|\s|\|\||&&|;|\s\d?>")


def command_lines() -> list[Shown]:
    """Every `horae …` the documents show, as the words after `horae`."""
    found = []
    for path in DOCS:
        spans, lines = code(path)
        for shown in spans:
            if m := COMMAND.search(shown.text):
                found.append(Shown(shown.where, " ".join(m.group(1).split())))
        for shown in lines:
            if m := COMMAND.search(shown.text):
                words = SHELL_END.split(m.group(1))[0]
                found.append(Shown(shown.where, " ".join(words.split())))
    return found


def words(line: str) -> list[str]:
    """Shell words, with usage brackets (`[--tz ZONE]`, `(A | B)`) and lone `|`s dropped."""
    try:
        split = shlex.split(line)
    except ValueError:  # an unbalanced quote in a usage line
        split = line.split()
    stripped = (w.strip("[](){}") for w in split)
    return [w for w in stripped if w and w != "|"]


def leaf_problems(path: list[str], command: Any, rest: list[str]) -> list[str]:
    """What is wrong with the words given to one command: its `--help` fails, a flag it
    does not take, a word when it takes no arguments."""
    name = " ".join(["horae", *path])
    result = CliRunner().invoke(app, [*path, "--help"])
    if result.exit_code != 0:
        return [f"`{name} --help` exits {result.exit_code}: {result.output!r}"]
    options = {
        opt: param
        for param in command.params
        if param.param_type_name == "option" and not param.hidden
        for opt in [*param.opts, *param.secondary_opts]
    }
    takes_arguments = any(p.param_type_name == "argument" for p in command.params)
    problems = []
    value_next = False  # the word after an option that takes a value is that value
    for word in rest:
        if word.startswith("-") and len(word) > 1:
            flag, equals, _ = word.partition("=")
            for alternative in flag.split("|"):
                option = options.get(alternative)
                if option is None:
                    problems.append(f"`{name}` has no option {alternative}")
                value_next = not equals and not (option and (option.is_flag or option.count))
        elif value_next:
            value_next = False
        elif not takes_arguments and word not in ("…", "..."):
            problems.append(f"`{name}` takes no argument {word!r}")
    return problems


def check_command(where: str, line: str, root: Any) -> list[str]:
    """What is wrong with one shown command line: commands that do not exist, and each
    command's `leaf_problems`. `root` is the click command Typer builds (duck-typed:
    Typer ships its own copy of click)."""
    todo: list[tuple[list[str], Any, list[str]]] = [([], root, words(line))]
    problems = []
    while todo:
        path, command, rest = todo.pop()
        subcommands = getattr(command, "commands", None)
        if subcommands is None or not rest or rest[0].startswith("-"):
            problems += leaf_problems(path, command, rest)
            continue
        names = rest[0].split("|")  # `horae jobs pause|resume|cancel JOB`
        if missing := [n for n in names if n not in subcommands]:
            problems.append(f"no command `horae {' '.join([*path, *missing])}`")
            continue
        todo += [([*path, n], subcommands[n], rest[1:]) for n in names]
    return [f"{where}: `horae {line}`: {problem}" for problem in problems]


def test_the_documents_show_horae_commands() -> None:
    # The scan below must see something, or it would pass on documents it cannot read.
    shown = {line.text.split()[0] for line in command_lines() if line.text}
    assert {"jobs", "executions", "worker", "schedule"} <= shown


def test_every_command_and_flag_the_documents_show_exists() -> None:
    root = typer.main.get_command(app)
    problems = [
        p for shown in command_lines() for p in check_command(shown.where, shown.text, root)
    ]
    assert problems == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("jobs ls --tenant T [--bogus-flag X]", "has no option --bogus-flag"),
        ("jobs pause|resume|frobnicate JOB", "no command `horae jobs frobnicate`"),
        ("warehouse gc", "no command `horae warehouse`"),
        ("migrate everything", "takes no argument 'everything'"),
        ("schedule preview '0 9 * * 1' --tz Europe/Paris -q 5", "has no option -q"),
    ],
)
def test_the_command_check_catches_what_does_not_exist(line: str, problem: str) -> None:
    [found] = check_command("doc.md:1", line, typer.main.get_command(app))
    assert problem in found


def test_the_command_check_accepts_usage_forms() -> None:
    root = typer.main.get_command(app)
    for line in [
        "jobs create --task T (--cron EXPR [--tz ZONE] | --run-at ISO) [--payload JSON]",
        "tenants ls|set",
        "executions JOB… [--status S] [--watch]",
        'schedule preview "0 9 * * 1" --tz Europe/Paris -n 5',
    ]:
        assert check_command("doc.md:1", line, root) == []


# ----------------------------------------------------------------------- environment

VARIABLE = re.compile(r"\bHORAE_[A-Z0-9]+(?:_[A-Z0-9]+)*\b")
# Read outside horae/: by the chart, the scripts in hack/, the Makefile, and the chaos
# suite's own knobs (documented in docs/reliability.md, read by tests/chaos/).
OTHER_READERS = [REPO / "charts", REPO / "hack", REPO / "Makefile", REPO / "tests" / "chaos"]
# Read by Horae but deliberately not documented, each with its reason. (Empty: keep it so.)
UNDOCUMENTED: dict[str, str] = {}


def documented_variables() -> dict[str, str]:
    """Each `HORAE_*` the documents name, with where it is first named."""
    found: dict[str, str] = {}
    for path in DOCS:
        text = path.read_text()
        for m in VARIABLE.finditer(text):
            found.setdefault(m.group(0), _where(path, text, m.start()))
    return found


def variables_horae_reads() -> set[str]:
    """The `HORAE_*` names written as a whole string in horae/: `env.get("HORAE_X")`,
    `os.environ["HORAE_X"] = …`, `_int(env, "HORAE_X", …)`."""
    names = set()
    for path in (REPO / "horae").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        strings = (n.value for n in ast.walk(tree) if isinstance(n, ast.Constant))
        names.update(s for s in strings if isinstance(s, str) and VARIABLE.fullmatch(s))
    return names


def variables_named_elsewhere() -> set[str]:
    files = [p for root in OTHER_READERS for p in ([root] if root.is_file() else root.rglob("*"))]
    return {
        m.group(0)
        for path in files
        if path.is_file() and path.suffix not in {".pyc", ".png"}
        for m in VARIABLE.finditer(path.read_text(errors="replace"))
    }


def test_every_documented_variable_is_read_by_the_code() -> None:
    read = variables_horae_reads() | variables_named_elsewhere()
    unread = {name: where for name, where in documented_variables().items() if name not in read}
    assert unread == {}


def test_every_variable_horae_reads_is_documented() -> None:
    assert "HORAE_DATABASE_URL" in variables_horae_reads()  # the scan sees the reads
    undocumented = variables_horae_reads() - documented_variables().keys() - UNDOCUMENTED.keys()
    assert undocumented == set()


# -------------------------------------------------------------------------- metrics

METRIC = re.compile(r"\b(horae_[a-z0-9_]+)(?:\{([^}]*)\})?")
SAMPLE_SUFFIXES = ("_bucket", "_count", "_sum")
LABEL = re.compile(r"([a-z_]+)\s*(?:=~?|!=)?\s*(?:\"([^\"]*)\")?")


def horae_metrics() -> dict[str, tuple[str, ...]]:
    """Horae's metrics, as `horae/metrics.py` defines them: exposed name -> label names."""
    found = {}
    for metric in vars(metrics).values():
        if isinstance(metric, MetricWrapperBase):
            # prometheus_client keeps name, type and label names private (no public getter).
            name = metric._name + ("_total" if metric._type == "counter" else "")
            found[name] = tuple(metric._labelnames)
    # Read at scrape time by a collector of its own (each store group's pool).
    for family in metrics.StorePools(lambda: [("main", 1, 1, 1)]).collect():
        found[family.name] = ("group", "state")
    return found


def metric_mentions() -> list[tuple[str, str, str | None]]:
    """(where, metric, labels) for every metric docs/operations.md names, and every
    `horae_…_total|_seconds…` any other document names."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for m in METRIC.finditer(text):
            name = m.group(1)
            metric_like = re.search(r"_(total|seconds|bucket|count|sum)$", name)
            if path.name == "operations.md" or metric_like:
                found.append((_where(path, text, m.start()), name, m.group(2)))
    return found


def check_metric(where: str, name: str, labels: str | None) -> list[str]:
    known = horae_metrics()
    base = next((name.removesuffix(s) for s in SAMPLE_SUFFIXES if name.endswith(s)), name)
    if name not in known and base not in known:
        return [f"{where}: no metric {name}"]
    problems = []
    for label, value in LABEL.findall(labels or ""):
        if label not in known[base if base in known else name]:
            problems.append(f"{where}: {base} has no label {label}")
        elif value and f'"{value}"' not in _horae_source():
            problems.append(f'{where}: no {label}="{value}" is ever recorded on {base}')
    return problems


def _horae_source() -> str:
    return "\n".join(p.read_text() for p in sorted((REPO / "horae").rglob("*.py")))


def test_every_metric_the_documents_name_exists_with_its_labels() -> None:
    mentions = metric_mentions()
    assert any(name == "horae_dead_letters_total" for _, name, _ in mentions)
    assert [p for mention in mentions for p in check_metric(*mention)] == []


def test_every_metric_is_in_the_operations_table() -> None:
    text = (REPO / "docs" / "operations.md").read_text()
    assert [m for m in horae_metrics() if f"| `{m}" not in text] == []


@pytest.mark.parametrize(
    ("name", "labels", "problem"),
    [
        ("horae_bogus_total", None, "no metric horae_bogus_total"),
        ("horae_reaped_total", 'kind="vanished"', 'no kind="vanished" is ever recorded'),
        ("horae_reaped_total", 'reason="lease_lost"', "has no label reason"),
    ],
)
def test_the_metric_check_catches_what_does_not_exist(
    name: str, labels: str | None, problem: str
) -> None:
    [found] = check_metric("doc.md:1", name, labels)
    assert problem in found


def test_the_metric_check_accepts_histogram_samples_and_recorded_labels() -> None:
    assert check_metric("doc.md:1", "horae_start_lag_seconds_bucket", None) == []
    assert check_metric("doc.md:1", "horae_reaped_total", 'kind="lease_lost"') == []


# --------------------------------------------------------------------------- layers


def test_the_layer_drawing_is_the_import_linter_contract() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    [layers] = [c["layers"] for c in contracts["contracts"] if c["type"] == "layers"]
    text = (REPO / "docs" / "architecture.md").read_text()
    drawing = re.search(r"^## Layers.*?```\n(.*?)```", text, re.DOTALL | re.MULTILINE)
    assert drawing is not None, "docs/architecture.md has no layer drawing"
    # Each line: the layer's modules, then (after two spaces or more) a comment.
    drawn = [re.split(r"\s{2,}", line.strip())[0] for line in drawing.group(1).splitlines()]
    assert drawn == layers


# ---------------------------------------------------------------------------- chart

CHART = REPO / "charts" / "horae"


def option_paths(values: Any, prefix: str = "") -> set[str]:
    """The dotted paths of a values file's options (a non-empty mapping is not an option
    itself; its keys are)."""
    if not isinstance(values, dict) or not values:
        return {prefix}
    paths = (
        option_paths(value, f"{prefix}.{key}" if prefix else key) for key, value in values.items()
    )
    return set().union(*paths)


def test_every_chart_option_is_shown_in_the_all_options_values() -> None:
    # README: "every option is shown in `charts/horae/ci/all-options-values.yaml`".
    defaults = option_paths(yaml.safe_load((CHART / "values.yaml").read_text()))
    shown = yaml.safe_load((CHART / "ci" / "all-options-values.yaml").read_text())
    # Free-form maps (nodeSelector: {kubernetes.io/os: linux}) show their own keys.
    shown_paths = option_paths(shown)
    covered = {p for p in defaults if any(s == p or s.startswith(f"{p}.") for s in shown_paths)}
    assert defaults - covered == set()
