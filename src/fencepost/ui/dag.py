"""Where the workflow page draws each step of a Run's DAG: a pure, server-side layered layout (no JavaScript
library, no external service).

A step's layer is the length of the longest path from a root (a step that needs nothing) to it, so every edge
points down to a later layer. Within a layer, steps are in step-key order; a layer wider than ``wrap`` steps is
folded into several rows, so a 126-way fan-out stays a compact grid instead of a 13,000 px line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Node box and gaps, in SVG user units (CSS pixels at scale 1).
NODE_W = 104
NODE_H = 40
GAP_X = 12
GAP_ROW = 14
GAP_LAYER = 40
MARGIN = 8
#: Most steps in one row of a layer.
WRAP = 10


@dataclass(frozen=True)
class Node:
    """One step's box: its key, layer (0 = a root), top-left corner ``x``/``y`` and centre ``cx``."""

    key: str
    layer: int
    x: int
    y: int

    @property
    def cx(self) -> int:
        return self.x + NODE_W // 2


@dataclass(frozen=True)
class Edge:
    """A need: from the bottom centre of ``source`` to the top centre of ``target`` (coordinates included)."""

    source: str
    target: str
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Layout:
    """Nodes in step-key order, edges by (target, source), the drawing's ``width``/``height`` and its layers."""

    nodes: list[Node]
    edges: list[Edge]
    layers: list[list[str]]
    width: int
    height: int
    node_w: int = NODE_W
    node_h: int = NODE_H


def layers(steps: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Each step's layer: 0 for a root, else 1 + the largest layer among its needs (longest path from a root).

    Args:
        steps: ``{"key": str, "needs": [str, ...]}`` each; the plan guarantees keys are unique and needs acyclic.
    Returns:
        ``key -> layer``.
    Raises:
        ValueError: a need names no step, or the needs form a cycle (a plan never does; the page says so).
    """
    needs = {str(s["key"]): [str(n) for n in s["needs"]] for s in steps}
    depth: dict[str, int] = {}
    for start in sorted(needs):
        # Iterative depth-first walk (a 128-step chain would be deep for recursion on some stacks).
        stack: list[tuple[str, int]] = [(start, 0)]
        on_path: set[str] = set()
        while stack:
            key, index = stack.pop()
            if key in depth:
                continue
            if key not in needs:
                raise ValueError(f"step need {key!r} names no step")
            on_path.add(key)
            pending = [n for n in needs[key][index:] if n not in depth]
            if pending:
                if pending[0] in on_path:
                    raise ValueError(f"the needs of step {key!r} form a cycle")
                stack.append((key, index))
                stack.append((pending[0], 0))
                continue
            depth[key] = 1 + max((depth[n] for n in needs[key]), default=-1)
            on_path.discard(key)
    return depth


def layout(steps: Sequence[Mapping[str, Any]], *, wrap: int = WRAP) -> Layout:
    """The layered drawing of ``steps`` (``{"key", "needs"}`` each, as ``workflows.views.run_view`` gives them).

    Returns:
        A ``Layout``; an empty one (width and height of the margins) for no steps.
    Raises:
        ValueError: from ``layers``.
    """
    depth = layers(steps)
    by_layer: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for key in sorted(depth):
        by_layer[depth[key]].append(key)
    widest = min(wrap, max((len(keys) for keys in by_layer), default=0))
    width = 2 * MARGIN + widest * NODE_W + max(widest - 1, 0) * GAP_X
    placed: dict[str, Node] = {}
    y = MARGIN
    for number, keys in enumerate(by_layer):
        for row_start in range(0, len(keys), wrap):
            row = keys[row_start:row_start + wrap]
            row_w = len(row) * NODE_W + (len(row) - 1) * GAP_X
            x = (width - row_w) // 2  # centred under the widest row
            for key in row:
                placed[key] = Node(key, number, x, y)
                x += NODE_W + GAP_X
            y += NODE_H + GAP_ROW
        y += GAP_LAYER - GAP_ROW
    height = y - GAP_LAYER + MARGIN if by_layer else 2 * MARGIN  # y holds the top margin already
    edges = [Edge(need, str(s["key"]), placed[need].cx, placed[need].y + NODE_H,
                  placed[str(s["key"])].cx, placed[str(s["key"])].y)
             for s in sorted(steps, key=lambda s: str(s["key"])) for need in sorted(str(n) for n in s["needs"])]
    return Layout([placed[k] for k in sorted(placed)], edges, by_layer, width, height)


def layout_json(drawn: Layout) -> dict[str, Any]:
    """``drawn`` as plain JSON for ``app.js`` (which draws the same SVG when the page came without it):
    ``{"width", "height", "node_w", "node_h", "layers": [[key]], "nodes": [{"key", "layer", "x", "y", "cx"}],
    "edges": [{"source", "target", "x1", "y1", "x2", "y2"}]}``."""
    return {"width": drawn.width, "height": drawn.height, "node_w": drawn.node_w, "node_h": drawn.node_h,
            "layers": drawn.layers,
            "nodes": [{"key": n.key, "layer": n.layer, "x": n.x, "y": n.y, "cx": n.cx} for n in drawn.nodes],
            "edges": [{"source": e.source, "target": e.target, "x1": e.x1, "y1": e.y1, "x2": e.x2, "y2": e.y2}
                      for e in drawn.edges]}
