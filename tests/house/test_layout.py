"""The house's rules, read from the code's own imports (every import statement counts: at the top, inside
a function, under TYPE_CHECKING): data flows one way, ingest -> sink -> store, each room imports only
the rooms below it, and no module imports itself back through others."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("store", "ingest", "sink")

# room -> the rooms of this project it may import (a room is a package, or a prefix of one)
ALLOWED = {
    "store.format": {"store.format", "store.errors", "store.failed_call"},
    "store.scan": {"store.scan", "store.format", "store.errors", "store.failed_call"},
    "store.space": {"store.errors", "store.failed_call"},
    "store.failed_call": set(),   # a leaf: what an OSError says of its call
    "store.queue": {"store.queue", "store.format", "store.space", "store.errors", "store.failed_call"},
    "store.log": {"store.log", "store.queue", "store.scan", "store.format", "store.space", "store.errors",
                  "store.failed_call"},
    "store.index": {"store.index", "store.log", "store.scan", "store.format", "store.space", "store.errors",
                    "store.failed_call"},
    # the store's read-only view and its readers: above the index, whose lookups StoreReader serves
    "store.read": {"store.read", "store.index", "store.log", "store.queue", "store.scan", "store.format",
                   "store.space", "store.errors", "store.failed_call"},
    # RocketMQ 5's compaction logs, fed from the consume queues behind the appends
    "store.compaction": {"store.compaction", "store.log", "store.queue", "store.scan", "store.format", "store.errors",
                         "store.failed_call"},
    "store.tools": {"store"},
    "store": {"store.format", "store.scan", "store.queue", "store.log", "store.index", "store.compaction", "store.errors",
              "store.failed_call", "store.config", "store.retention", "store.message_store", "store.read", "store.topics",
              "store.usage", "store.space", "store.store_open", "store.store_failure", "store.store_services",
              "store.store_commit", "store!"},
    "sink": {"sink", "store!"},
    # the hand-over's two halves (read task and driver) and the path checks they rest on: below the
    # rest of sink, so ingest's tasks import it without the writer
    "sink.handover": {"sink.handover", "store!", "store.format"},
    "ingest.kafka": {"ingest.kafka", "ingest.stream_runner"},   # a leaf: what any Python stream reader does on stop
    "ingest": {"ingest", "sink", "store!", "store.format", "store.scan", "store.tools!"},
    # what development runs beside the job (the demo, the embedded brokers): it drives the job and reads
    # its store; the job never imports it back (test_the_job_never_loads_the_development_launchers)
    "ingest.devtools": {"ingest", "sink", "store!", "store.format"},
}

DEVTOOLS = "ingest.devtools"
# the modules that may load the development launchers, inside a function only: the console script's
# `commitlog broker` subcommand, so `commitlog run` never imports a broker launcher
DEVTOOLS_DOORS = {"ingest.cli"}


def modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path


def imports(name: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of this project's packages in ``path``; a relative import is a
    failure of its own (one style: absolute)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (the house uses absolute ones)"
            targets = [node.module or ""]
            # `from store import tools` names a module, not a value
            targets += [f"{node.module}.{a.name}" for a in node.names
                        if (ROOT / (node.module or "").replace(".", "/") / a.name).exists()
                        or (ROOT / (node.module or "").replace(".", "/") / f"{a.name}.py").exists()]
            found = targets[1:] or targets[:1]
        elif isinstance(node, ast.Import):
            found = [a.name for a in node.names]
        else:
            continue
        for target in found:
            if target.split(".")[0] in PACKAGES:
                yield node.lineno, target


def top_level_lines(path: Path) -> set[int]:
    """The lines of the imports a module runs when it is loaded (its body's own import statements)."""
    body = ast.parse(path.read_text(), str(path)).body
    return {node.lineno for node in body if isinstance(node, ast.Import | ast.ImportFrom)}


def room_of(name: str) -> str:
    return max((r for r in ALLOWED if name == r or name.startswith(r + ".")), key=len)


def allowed(room: str, target: str) -> bool:
    for rule in ALLOWED[room]:
        if rule.endswith("!"):          # the package's face only, not its modules
            if target == rule[:-1]:
                return True
        elif target == rule or target.startswith(rule + "."):
            return True
    return False


def test_every_import_goes_down_to_a_room_it_may_use() -> None:
    wrong = []
    for name, path in modules():
        room = room_of(name)
        for line, target in imports(name, path):
            if not allowed(room, target):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {room} may not import {target}")
    assert not wrong, "\n".join(wrong)


def test_the_job_never_loads_the_development_launchers() -> None:
    wrong = []
    for name, path in modules():
        if room_of(name) == DEVTOOLS:
            continue
        loaded = top_level_lines(path)
        for line, target in imports(name, path):
            if target != DEVTOOLS and not target.startswith(DEVTOOLS + "."):
                continue
            if name not in DEVTOOLS_DOORS:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name} may not import {target} (a development launcher)")
            elif line in loaded:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {target} when it is loaded; "
                             f"import it inside the subcommand")
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_itself_back_through_others() -> None:
    graph = {name: {t for _, t in imports(name, path)} for name, path in modules()}
    graph = {n: {t for t in ts if t in graph and t != n} for n, ts in graph.items()}
    # a package face (__init__) that hands its modules' names on is not a step of a circle
    faces = {n for n, p in modules() if p.name == "__init__.py"}
    graph = {n: ts - faces for n, ts in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(n: str) -> None:       # Tarjan's strongly connected components
        index[n] = low[n] = len(index)
        stack.append(n)
        for t in graph[n]:
            if t not in index:
                visit(t)
                low[n] = min(low[n], low[t])
            elif t in stack:
                low[n] = min(low[n], index[t])
        if low[n] == index[n]:
            component = []
            while True:
                m = stack.pop()
                component.append(m)
                if m == n:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for n in graph:
        if n not in index:
            visit(n)
    assert not circles, f"import circles: {circles}"


def test_every_package_says_what_it_is_for() -> None:
    for name, path in modules():
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc and len(doc) > 60, f"{path.relative_to(ROOT)}: no docstring saying what the room is for"


def test_the_rules_see_the_imports_they_judge() -> None:
    """The reader itself: a late import inside a function counts, a face import of a module counts as
    that module."""
    names = dict(modules())
    seen = {t for _, t in imports("ingest.cli", names["ingest.cli"])}
    assert "store.tools" in seen and "ingest.devtools.broker" in seen
    assert room_of("store.log.commitlog") == "store.log" and room_of("store.read.reader") == "store.read"
    assert not allowed("sink", "store.log.commitlog") and allowed("sink", "store")
    assert not allowed("ingest", "store.tools.dump") and allowed("ingest", "store.format")
    assert room_of("sink.handover.spool") == "sink.handover" and not allowed("sink.handover", "sink.state")
    assert room_of("ingest.devtools.broker.tansu") == DEVTOOLS and room_of("ingest.cli") == "ingest"
    cli_lines = [line for line, t in imports("ingest.cli", names["ingest.cli"]) if t.startswith(DEVTOOLS)]
    assert cli_lines and not set(cli_lines) & top_level_lines(names["ingest.cli"])
    assert {"ingest.devtools.broker.base"} <= {t for _, t in imports("ingest.devtools.broker.tansu",
                                                                     names["ingest.devtools.broker.tansu"])}


def _declared_private_fields(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, class, field) of each private field a class declares by a bare annotation (no value),
    outside dataclasses and Protocols, whose fields those annotations are."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ClassDef):
            continue
        marks = {ast.unparse(d).split("(")[0] for d in node.decorator_list} | {ast.unparse(b) for b in node.bases}
        if marks & {"dataclass", "dataclasses.dataclass", "Protocol", "typing.Protocol"}:
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and item.value is None and isinstance(item.target, ast.Name) \
                    and item.target.id.startswith("_"):
                yield item.lineno, node.name, item.target.id


def test_no_class_reads_another_class_private_fields_through_annotations() -> None:
    """A part is composed and handed over, or built on the class that owns the state, never a mixin
    that declares the private fields of the class it is mixed into (issue 57: MessageStore holds its
    parts; the consume queues' reads and trim, and the reader's Arrow side, build on the owner)."""
    wrong = [f"{path.relative_to(ROOT)}:{line}: {cls} declares {field} without owning it"
             for _, path in modules() for line, cls, field in _declared_private_fields(path)]
    assert not wrong, "\n".join(wrong)
