"""The package's import graph, derived from the code (ast, no import is run).

A node is a top-level module of `servesweep` or a subpackage (down to the second level:
`results`, `results/collect`, `server/engines`); `servesweep/__init__.py` is the node
`servesweep`. Every `import`/`from … import` of `servesweep` counts, at module level, inside
a function or under `if TYPE_CHECKING:`; the last two are *deferred* edges. Run as a script
(`python tests/import_graph.py [ROOT]`) it prints the figures docs/design.md gives: nodes,
layers (longest-path layering over the import-time edges), edges, deferred edges that point
up (to a node on the same or a higher layer) and cycles (strongly connected sets of nodes).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def node_of(package: Path, dotted: str) -> str | None:
    """The node a `servesweep.…` module name belongs to (None: not the package)."""
    parts = dotted.split(".")
    if parts[0] != "servesweep":
        return None
    parts = parts[1:]
    if not parts:
        return "servesweep"
    if (package / parts[0]).is_dir():
        if len(parts) > 1 and (package / parts[0] / parts[1]).is_dir():
            return f"{parts[0]}/{parts[1]}"
        return parts[0]
    return parts[0] if (package / f"{parts[0]}.py").exists() else None


def _deferred_lines(tree: ast.Module) -> set[int]:
    """Line numbers of imports inside functions or `if TYPE_CHECKING:` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        deferred = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or (
            isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        )
        if deferred:
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    lines.add(inner.lineno)
    return lines


def edges(package: Path) -> dict[tuple[str, str], bool]:
    """{(importer, imported): deferred?} between distinct nodes; an edge is deferred only
    when every import making it is."""
    found: dict[tuple[str, str], bool] = {}
    for path in sorted(package.rglob("*.py")):
        dotted = ".".join(("servesweep", *path.relative_to(package).with_suffix("").parts))
        dotted = dotted.removesuffix(".__init__")
        source = node_of(package, dotted)
        tree = ast.parse(path.read_text())
        deferred = _deferred_lines(tree)
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            for target in targets:
                # `from servesweep.x import name`: name may be a module or an attribute.
                dest = node_of(package, target)
                if dest is None or not _exists(package, target):
                    dest = node_of(package, target.rsplit(".", 1)[0])
                if dest is None or dest == source:
                    continue
                key = (source, dest)
                found[key] = found.get(key, True) and node.lineno in deferred
    return found


def _exists(package: Path, dotted: str) -> bool:
    rel = Path(*dotted.split(".")[1:])
    return (package / rel).is_dir() or (package / rel).with_suffix(".py").exists()


def nodes(package: Path) -> set[str]:
    out = set()
    for path in package.rglob("*.py"):
        dotted = ".".join(("servesweep", *path.relative_to(package).with_suffix("").parts))
        out.add(node_of(package, dotted.removesuffix(".__init__")))
    return out


def cycles(all_nodes: set[str], graph: dict[tuple[str, str], bool]) -> list[list[str]]:
    """The strongly connected sets of more than one node (Tarjan)."""
    succ: dict[str, list[str]] = {n: [] for n in all_nodes}
    for a, b in graph:
        succ[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(all_nodes):
        if v not in index:
            visit(v)
    return out


def layers(all_nodes: set[str], graph: dict[tuple[str, str], bool]) -> dict[str, int]:
    """Longest-path layering over the import-time (not deferred) edges: a node with no
    imports is on layer 0, any other one above everything it imports. A cycle's nodes
    share a layer."""
    hard = {(a, b): d for (a, b), d in graph.items() if not d}
    group_of = {n: n for n in all_nodes}
    for group in cycles(all_nodes, hard):
        for n in group:
            group_of[n] = group[0]
    succ: dict[str, set[str]] = {}
    for a, b in hard:
        if group_of[a] != group_of[b]:
            succ.setdefault(group_of[a], set()).add(group_of[b])
    memo: dict[str, int] = {}

    def depth(g: str) -> int:
        if g not in memo:
            memo[g] = 1 + max((depth(s) for s in succ.get(g, ())), default=-1)
        return memo[g]

    return {n: depth(group_of[n]) for n in all_nodes}


def figures(package: Path) -> dict:
    all_nodes = nodes(package)
    graph = edges(package)
    layer = layers(all_nodes, graph)
    up = sorted((a, b) for (a, b), d in graph.items() if d and layer[b] >= layer[a])
    return {
        "nodes": len(all_nodes),
        "layers": 1 + max(layer.values()),
        "edges": len(graph),
        "deferred": sum(graph.values()),
        "up": up,
        "cycles": cycles(all_nodes, graph),
    }


if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    f = figures(root / "servesweep")
    print(
        f"nodes {f['nodes']}, layers {f['layers']}, edges {f['edges']} "
        f"({f['deferred']} deferred), up {len(f['up'])}, cycles {len(f['cycles'])}"
    )
    for a, b in f["up"]:
        print(f"  up: {a} -> {b}")
    for c in f["cycles"]:
        print(f"  cycle: {' '.join(c)}")
