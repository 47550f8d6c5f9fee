"""A track's driveline as the game gives it (child.py's "driveline": `Track.path_nodes` and the rest), made into what
the race needs: the centerline of a lap (the zones' source, games/zones.py) and the road's quads (the frame's drawing).

Nodes are 3-D segments (start, end) in world coordinates (x, y up, z), each with the road's width; `successors` says
which node follows which: the main route follows each node's first successor, the others are branches (shortcuts,
alternative routes). The lap starts at the node whose distance down the track starts at 0, in either direction (a
reverse race gives the same nodes, each reversed, in another order). Numpy only.
"""

from __future__ import annotations

import numpy as np


def start_node(driveline: dict) -> int:
    """The node the lap starts with: the one at distance 0 down the track."""
    return int(np.argmin(np.asarray(driveline["distances"], np.float64)[:, 0]))


def main_route(driveline: dict) -> list[int]:
    """The nodes of one lap along the first successors, from the start node; ValueError if they do not come back to it."""
    successors = driveline["successors"]
    first = start_node(driveline)
    route, node = [first], first
    while True:
        node = successors[node][0]
        if node == first:
            return route
        if len(route) == len(successors):
            raise ValueError(f"the driveline's first successors from node {first} do not come back to it")
        route.append(node)


def lap_centerline(driveline: dict, laps: int = 1) -> np.ndarray:
    """(K, 3) points along the main route from the start line back to it, `laps` times over (the finish is the start)."""
    nodes = np.asarray(driveline["nodes"], np.float64)
    starts = nodes[main_route(driveline), 0]
    return np.concatenate([np.tile(starts, (laps, 1)), starts[:1]])


def _right(vectors: np.ndarray) -> np.ndarray:
    """The horizontal unit vector on the right of each direction (seen from above, z ahead, x is on the right); 0 for
    a vertical or empty one."""
    right = np.stack([vectors[:, 2], np.zeros(len(vectors)), -vectors[:, 0]], axis=1)
    norms = np.linalg.norm(right, axis=1, keepdims=True)
    return np.divide(right, norms, out=np.zeros_like(right), where=norms > 1e-9)


def road_quads(driveline: dict) -> np.ndarray:
    """(N, 4, 3) the road of each node: (start left, end left, end right, start right). At a joint both quads take the
    mean of their two sides' directions, so that consecutive quads meet without a gap."""
    nodes = np.asarray(driveline["nodes"], np.float64)
    half_widths = np.asarray(driveline["widths"], np.float64)[:, None] / 2
    direction = -_right(_right(nodes[:, 1] - nodes[:, 0]))  # horizontal unit directions (right of right is back)
    right = _right(direction)
    successors = driveline["successors"]
    predecessor = np.arange(len(nodes))
    for node, nexts in enumerate(successors):
        for following in nexts:
            if following != node and predecessor[following] == following:
                predecessor[following] = node
    following = np.array([nexts[0] if nexts else node for node, nexts in enumerate(successors)])
    right_start, right_end = _right(direction + direction[predecessor]), _right(direction + direction[following])
    right_start = np.where(np.any(right_start, axis=1, keepdims=True), right_start, right)
    right_end = np.where(np.any(right_end, axis=1, keepdims=True), right_end, right)
    start, end = nodes[:, 0], nodes[:, 1]
    return np.stack(
        [
            start - right_start * half_widths,
            end - right_end * half_widths,
            end + right_end * half_widths,
            start + right_start * half_widths,
        ],
        axis=1,
    )
