"""The package layering of docs/architecture.md, checked from the source.

Every import of every module under bkfast/ (module level and inside functions; `.pyx`/`.pxi`/`.pxd`
imports and cimports too) is read from the files. A package (or top-level module) may import only from
a lower layer of the table below, which is the table of docs/architecture.md ("Layers"), and the
imports between packages, and between modules, form no cycle. The page must also name every package
and top-level module, and exception classes belong to the one hierarchy of bkfast.errors.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections import defaultdict
from pathlib import Path

from tests import REPO

ROOT = REPO
PACKAGE = ROOT / "bkfast"
DOC = ROOT / "docs" / "architecture.md"

# layer -> the packages and top-level modules on it; each may import only from lower layers.
LAYERS = {
    13: ["cli"],
    12: ["server"],
    11: ["http"],
    10: ["admin", "spark"],
    9: ["replication", "streams", "bkfast"],
    8: ["client"],
    7: ["net", "loadgen"],
    6: ["bookie"],
    5: ["dbstorage", "indexstorage"],
    4: ["storage"],
    3: ["meta"],
    2: ["codec", "_clientpath", "tls", "stats"],
    1: ["ids", "conf", "digests", "reactor", "proto", "_codec", "_refcodec", "_journal", "_entrylog"],
    0: ["errors", "_protowire", "_refcodec_v3", "conf_java", "conf_keys", "_stats"],
}
LAYER_OF = {unit: layer for layer, units in LAYERS.items() for unit in units}

_CYTHON_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+c?import\s+(.+)|c?import\s+([\w.]+))", re.M)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.is_dir() or any(base.with_suffix(s).exists() for s in (".py", ".pyx", ".pxd"))


def _absolute(path: Path, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    package = _module_name(path).split(".")
    if path.stem != "__init__":
        package.pop()
    base = package[: len(package) - level + 1]
    return ".".join(base + ([module] if module else []))


def _targets(base: str, names: list[str]) -> list[str]:
    # `from bkfast import _journal` imports the module bkfast._journal; `from bkfast import BookKeeper`
    # imports a name of the package itself.
    found = [f"{base}.{n}" for n in names if n != "*" and _is_module(f"{base}.{n}")]
    return found if len(found) == len(names) else [*found, base]


def imports_of(path: Path) -> list[str]:
    """Every bkfast module `path` imports, at any depth of the file."""
    text = path.read_text()
    found: list[str] = []
    if path.suffix == ".py":
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                found += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                found += _targets(_absolute(path, node.level, node.module), [a.name for a in node.names])
    else:
        for m in _CYTHON_IMPORT.finditer(text):
            if m.group(3):
                found.append(m.group(3))
            else:
                dots = len(m.group(1)) - len(m.group(1).lstrip("."))
                names = [n.split(" as ")[0].strip(" ()\\") for n in m.group(2).split(",")]
                found += _targets(_absolute(path, dots, m.group(1).lstrip(".") or None), [n for n in names if n])
    return [name for name in found if name == "bkfast" or name.startswith("bkfast.")]


def unit_of(module: str) -> str:
    """The layer-table entry a module belongs to: its top-level package or module under bkfast."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "bkfast"


def unit_of_file(path: Path) -> str:
    """Like unit_of; an include file (`_clientpath_reads.pxi`) belongs to the extension including it."""
    if path.suffix == ".pxi":
        owners = [p.stem for p in PACKAGE.glob("*.pyx") if path.stem.startswith(p.stem)]
        return max(owners, key=len)
    return unit_of(_module_name(path))


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*") if p.suffix in (".py", ".pyx", ".pxi", ".pxd")
                  and not p.name.endswith("_pb2.py") and "build" not in p.parts)


def package_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the "module -> module" imports that make that edge."""
    graph: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in source_files():
        src = unit_of_file(path)
        for target in imports_of(path):
            dst = unit_of(target)
            if dst != src:
                graph[src][dst].append(f"{path.relative_to(ROOT)} -> {target}")
    return graph


def top_level_units() -> set[str]:
    units = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in PACKAGE.iterdir() if p.suffix in (".py", ".pyx") and p.stem != "__init__"}
    return units | {"bkfast"}


def test_every_package_and_top_level_module_has_a_layer():
    missing = sorted(top_level_units() - set(LAYER_OF))
    assert not missing, f"add these to LAYERS here and to the layer table of docs/architecture.md: {missing}"


def test_no_package_imports_a_package_on_its_own_layer_or_above():
    wrong = [f"{src} (layer {LAYER_OF[src]}) imports {dst} (layer {LAYER_OF[dst]}): {why[0]}"
             for src, edges in sorted(package_graph().items()) for dst, why in sorted(edges.items())
             if src in LAYER_OF and dst in LAYER_OF and LAYER_OF[dst] >= LAYER_OF[src]]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    done: set[str] = set()
    cycles: list[str] = []

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            cycles.append(" -> ".join(path[path.index(node):] + [node]))
            return
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, [*path, node])
        done.add(node)

    for node in sorted(graph):
        visit(node, [])
    return cycles


def test_no_cycle_between_packages():
    cycles = _cycles({src: set(edges) for src, edges in package_graph().items()})
    assert not cycles, "package cycles:\n" + "\n".join(cycles)


def test_no_cycle_between_modules():
    # e.g. an interface module importing the implementations that import it (meta/driver.py once did).
    graph: dict[str, set[str]] = defaultdict(set)
    for path in source_files():
        if path.suffix != ".pxi":
            module = _module_name(path)
            graph[module] |= {target for target in imports_of(path) if target != module}
    cycles = _cycles(graph)
    assert not cycles, "module import cycles:\n" + "\n".join(cycles)


def test_clientpath_takes_the_cython_codec_never_the_facade():
    # BKFAST_PURE_CODEC=1 switches the bkfast.codec facade to the pure twin; the client's hot path must
    # not follow it silently.
    for path in PACKAGE.glob("_clientpath*.p*"):
        assert "bkfast.codec" not in imports_of(path), path


def test_metadata_interface_does_not_import_its_implementations():
    driver = imports_of(PACKAGE / "meta" / "driver.py")
    assert not {"bkfast.meta.zk_driver", "bkfast.meta.embedded"} & set(driver), driver


def _doc_layer_table() -> dict[int, list[str]]:
    text = DOC.read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    table = section.split("```text", 1)[1].split("```", 1)[0]
    rows: dict[int, list[str]] = {}
    for line in table.splitlines():
        m = re.match(r"\s*(\d+)\s+(.+?)\s*(?:#.*)?$", line)
        if m:
            rows[int(m.group(1))] = [u.strip() for u in m.group(2).split(",")]
    return rows


def test_the_layer_table_is_the_one_in_docs_architecture():
    doc = _doc_layer_table()
    assert {k: sorted(v) for k, v in doc.items()} == {k: sorted(v) for k, v in LAYERS.items()}


def test_docs_architecture_names_every_package_and_top_level_module():
    text = DOC.read_text()
    names = [f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()]
    names += [p.name for p in PACKAGE.iterdir() if p.suffix in (".py", ".pyx", ".pxi", ".pxd", ".h")]
    # whole names only: "storage/" is not named by "dbstorage/", nor "codec.py" by "_codec.pyx"
    missing = sorted(n for n in names if n != "__init__.py"
                     and not re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", text))
    assert not missing, f"docs/architecture.md does not mention: {missing}"


def test_errors_py_holds_the_one_exception_hierarchy():
    # Public exception classes derive from bkfast.errors' BKError; only errors.py subclasses Python's
    # exceptions directly (private control-flow exceptions, named _X, may too).
    builtin_errors = {name for name, value in vars(builtins).items()
                      if isinstance(value, type) and issubclass(value, BaseException)}
    outside = []
    for path in source_files():
        if path.suffix != ".py" or path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    isinstance(base, ast.Name) and base.id in builtin_errors for base in node.bases):
                outside.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not outside, f"exception classes outside bkfast.errors' hierarchy: {outside}"
