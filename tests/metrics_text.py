"""Reading Prometheus text (a bookie's /metrics) and the Java vector of metric series, for the metrics tests."""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

VECTOR = Path(__file__).parent / "vectors" / "java_metrics_4.16.7.txt"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


@dataclass
class Series:
    name: str
    kind: str
    labels: frozenset          # label keys, without success/quantile
    value: float | None = None
    extra: dict = field(default_factory=dict)


def java_series() -> list[Series]:
    """Every line of the vector: `type name {k=v, ...} value` (summaries: `ok=.. fail=.. sumOk=..`)."""
    out = []
    for line in VECTOR.read_text().splitlines():
        m = re.match(r"^(counter|gauge|summary) (\S+) \{(.*)\} (.*)$", line)
        assert m, line
        kind, name, labels, rest = m.groups()
        keys = frozenset(part.split("=", 1)[0] for part in labels.split(", ") if part)
        out.append(Series(name, kind, keys))
    return out


def parse(text: str) -> dict[str, dict]:
    """family name -> {"kind": ..., "samples": [(sample name, {label: value}, value)]}."""
    kinds: dict[str, str] = {}
    families: dict[str, dict] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            kinds[name] = kind
            families.setdefault(name, {"kind": kind, "samples": []})
            continue
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.groups()
        parsed = dict(_LABEL.findall(labels or ""))
        family = name
        for suffix in ("_count", "_sum", "_total", "_bucket", "_created"):
            if name not in kinds and name.endswith(suffix) and name[: -len(suffix)] in kinds:
                family = name[: -len(suffix)]
        families.setdefault(family, {"kind": kinds.get(family, "untyped"), "samples": []})
        families[family]["samples"].append((name, parsed, float(value)))
    return families


def scrape(port: int) -> dict[str, dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return parse(resp.read().decode())


def value(families: dict, name: str, **labels) -> float:
    """The sum of a family's samples named `name` whose labels include `labels`."""
    family_name = name
    for suffix in ("_count", "_sum"):
        if name.endswith(suffix) and name not in families:
            family_name = name[: -len(suffix)]
    family = families[family_name]
    return sum(v for sample, ls, v in family["samples"]
               if sample == name and all(ls.get(k) == str(x) for k, x in labels.items()))


def label_keys(family: dict) -> set[frozenset]:
    """The label-key sets of a family's series, without success/quantile."""
    return {frozenset(k for k in ls if k not in ("success", "quantile")) for _, ls, _ in family["samples"]}


def documented_exceptions(doc: Path) -> dict[str, str]:
    """The Java series docs/metrics.md says bkfast does not serve: `| `name` | why |` rows under its
    "Java series bkfast does not serve" heading."""
    text = doc.read_text()
    section = text.split("## Java series bkfast does not serve", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `([^`]+)` \| (.+?) \|$", section, re.MULTILINE)}
