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
    14: ["cli"],
    13: ["server"],
    12: ["http"],
    11: ["admin", "spark"],
    10: ["replication", "streams", "bkfast"],
    9: ["client"],
    8: ["net", "loadgen"],
    7: ["bookie"],
    6: ["dbstorage", "indexstorage"],
    5: ["storage"],
    4: ["meta"],
    3: ["codec", "_clientpath", "tls", "stats"],
    2: ["ids", "conf", "digests", "reactor", "proto", "_codec", "_refcodec", "_journal", "_entrylog", "_writecache"],
    1: ["_entryheader", "_entrysource", "_addsink"],
    0: ["errors", "_protowire", "_bigendian", "_refcodec_v3", "conf_java", "conf_keys", "_stats", "threads",
        "attributes"],
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


def _private_imports(path: Path) -> list[str]:
    """`from bkfast.x import _name` of a private name (not a module) of another package or top-level module."""
    if path.suffix != ".py":
        return []
    found = []
    src = unit_of_file(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(path, node.level, node.module)
            if not (base == "bkfast" or base.startswith("bkfast.")) or unit_of(base) == src:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and not _is_module(f"{base}.{alias.name}"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {base}.{alias.name}")
    return found


def test_no_private_name_is_imported_across_packages():
    # A package's `_name` is its own business; another package that needs it needs a public name. Extension
    # modules imported as modules (`from bkfast import _journal`) are modules, not private names.
    wrong = [hit for path in source_files() for hit in _private_imports(path)]
    assert not wrong, "private names imported across packages:\n" + "\n".join(wrong)


def test_the_private_import_rule_catches_a_private_import(tmp_path):
    module = PACKAGE / "client" / "_layering_probe_tmp.py"
    module.write_text("from bkfast.conf_keys import _not_public\n")
    try:
        assert _private_imports(module) == [
            "bkfast/client/_layering_probe_tmp.py:1 imports bkfast.conf_keys._not_public"]
    finally:
        module.unlink()


def _layout_block() -> str:
    return DOC.read_text().split("## Layout", 1)[1].split("```", 2)[1]


def test_every_file_the_layout_names_exists_where_it_says():
    # The layout block names files inside the paragraph of their package ("meta/ ... zk_driver.py"); a file
    # that was moved or removed leaves a sentence that is no longer true.
    missing = []
    package = ""
    for line in _layout_block().splitlines():
        head = re.match(r"^  (\S+)", line)
        if head:
            first = head.group(1)
            package = first.rstrip("/") if first.endswith("/") else ""
        for name in re.findall(r"(?<![\w/.])([A-Za-z_][\w]*\.(?:py|pyx|pxi|pxd|h))(?!\w)", line):
            where = [PACKAGE / package / name, PACKAGE / name] if package else [PACKAGE / name]
            if not any(p.exists() for p in where):
                missing.append(f"{package + '/' if package else ''}{name}")
    assert not missing, f"docs/architecture.md's layout names files that do not exist: {missing}"


def test_every_package_path_the_page_names_exists():
    # `meta/factory.py`, `net/read_pool.py` ... anywhere on the page.
    text = DOC.read_text()
    named = set(re.findall(r"(?<![\w/.])((?:[a-z_]+/)+[A-Za-z_]\w*\.(?:pyx|pxi|pxd|py|md|json))(?!\w)", text))
    missing = sorted(n for n in named if not (PACKAGE / n).exists() and not (ROOT / n).exists()
                     and not (ROOT / "docs" / n).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_page_claims_no_package_is_missing():
    # It once said streams/ and spark/ did not exist while they did.
    text = DOC.read_text()
    for sentence in re.split(r"(?<=\.)\s|\n\s*\n", text):
        if re.search(r"do(?:es)? not exist|planned package", sentence, re.I):
            for name in re.findall(r"`(\w+)/`", sentence):
                assert not (PACKAGE / name).is_dir(), f"the page says {name}/ does not exist: {sentence!r}"


def test_only_the_factory_imports_the_metadata_driver_implementations():
    # "meta/factory.py is the only module that imports the implementations" (the page's Layers section).
    implementations = {f"bkfast.meta.{m}" for m in ("zk_driver", "embedded")}
    importers = sorted(str(path.relative_to(ROOT)) for path in source_files()
                       if implementations & set(imports_of(path)) and path.name != "factory.py")
    assert not importers, f"modules other than meta/factory.py import a metadata driver implementation: {importers}"


def test_client_never_imports_the_bookie_or_a_storage_and_bookie_never_the_network():
    # The page's Layers section states both; the layer numbers alone would allow client -> bookie.
    graph = package_graph()
    assert not {"bookie", "dbstorage", "indexstorage", "storage"} & set(graph.get("client", {})), graph["client"]
    assert not {"net", "server", "http"} & set(graph.get("bookie", {})), graph["bookie"]


def test_http_never_builds_what_it_serves():
    # "http/ only exposes what it is handed (the Bookie, the listener factory, the metrics) and never builds it."
    builders = {"bkfast.bookie.bookie", "bkfast.server", "bkfast.server.service", "bkfast.net.server"}
    wrong = [f"{path.relative_to(ROOT)} -> {target}" for path in source_files() if unit_of_file(path) == "http"
             for target in imports_of(path) if target in builders]
    assert not wrong, wrong


# Modules below the edge that take typed settings (issue 26): they never read a configuration themselves.
# Their settings classes' `from_conf` is the one place a configuration is read; the edge (bkfast.server,
# storage_factory, the Bookie for its parts) calls it. Not listed yet: bookie/journal.py and journals.py,
# the ledger storages (dbstorage/, indexstorage/), meta/, tls/ and stats/provider.py still read one.
TYPED_SETTINGS_MODULES = [
    "storage/entrylogger.py", "net/server.py", "net/request_stats.py", "bookie/bookie.py", "bookie/compaction.py",
    "bookie/disk_checker.py", "bookie/gc.py", "bookie/gc_stats.py", "bookie/read_only.py", "bookie/settings.py",
    "bookie/stats.py", "bookie/storage_full.py", "bookie/journal.py", "meta/cookies.py", "meta/etcd_driver.py",
    "meta/etcd_kv.py", "meta/etcd_http.py", "meta/etcd_session.py", "meta/etcd_registration.py",
    "meta/etcd_underreplication.py", "client/placement.py", "client/placement_rack.py", "client/placement_region.py",
    "client/placement_zone.py", "dbstorage/directory.py", "dbstorage/storage.py", "indexstorage/storage.py",
    "client/placement_factory.py", "client/topology.py", "meta/zk_driver.py", "meta/zk_layout.py", "tls/authz.py",
    "client/handle.py", "client/reads.py", "client/write_handle.py", "client/recovery.py", "client/disk_weights.py",
    "streams/namespace.py", "streams/writer.py", "spark/tasks.py", "http/server.py", "http/security.py",
]
_CONF_NAMES = frozenset({"conf", "config", "configuration", "_conf"})


def _conf_reads(path: Path, root: Path = ROOT) -> list[str]:
    """`<conf>.get("key")` and any other `<conf>.<attr>` (accessors, is_set) outside a `from_conf` (a settings
    class's) or an `<x>_from_conf` builder function, where `<conf>` is a name or attribute called conf / config /
    configuration."""
    found: list[str] = []

    def visit(node: ast.AST, in_from_conf: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_from_conf = in_from_conf or node.name == "from_conf" or node.name.endswith("_from_conf")
        if isinstance(node, ast.Attribute) and not in_from_conf:
            base = node.value
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name in _CONF_NAMES:
                found.append(f"{path.relative_to(root)}:{node.lineno} reads {name}.{node.attr}")
        for child in ast.iter_child_nodes(node):
            visit(child, in_from_conf)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def test_lower_layers_take_typed_settings_and_never_read_the_configuration():
    wrong = [hit for rel in TYPED_SETTINGS_MODULES for hit in _conf_reads(PACKAGE / rel)]
    assert not wrong, ("read the configuration at the edge (a settings class's from_conf) and hand the values "
                       "down:\n" + "\n".join(wrong))


def test_the_configuration_read_rule_catches_a_read(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("class S:\n    @classmethod\n    def from_conf(cls, conf):\n        return conf.get('a')\n\n"
                      "def f(self, conf):\n    return conf.get('logSizeLimit'), self.conf.page_size, conf\n\n"
                      "def timeout_from_conf(conf):\n    return conf.get('zkTimeout')\n")
    assert _conf_reads(module, root=tmp_path) == ["probe.py:7 reads conf.get", "probe.py:7 reads conf.page_size"]
