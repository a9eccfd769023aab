"""YAML aliases, checked in linear time before anything reads the data: an alias inside its own
anchor, or aliases that expand too far (a "billion laughs"), are one finding at the alias's
line. A leaf under :mod:`spanspec.registry.loader`."""

from __future__ import annotations

import yaml

from spanspec.findings import Finding, SpecError

__all__ = ["MAX_EXPANDED_NODES", "check_aliases", "finding_at"]

# An alias repeats its anchor's whole subtree for everything that reads the data (validation,
# compilation); a few hundred bytes of nested aliases ("billion laughs") expand exponentially.
MAX_EXPANDED_NODES = 1_000_000


def check_aliases(name: str, root: yaml.Node | None) -> None:
    """Raise a finding for an alias inside its own anchor, or aliases that expand too far.

    Each node is visited once (the composer shares the node of an anchor with its aliases), so
    this is linear in the file, whatever the aliases would expand to.
    """
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)] if root is not None else []
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_EXPANDED_NODES:
                raise SpecError(
                    [finding_at(node, name, "yaml.alias_expansion", _EXPANSION_MESSAGE)]
                ) from None
            continue
        if key in sizes:
            continue
        open_.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_:
                raise SpecError(
                    [
                        finding_at(
                            node,
                            name,
                            "yaml.recursive_alias",
                            "an alias refers to the anchor it is inside, so the value would "
                            "contain itself; point it at an anchor defined outside it",
                        )
                    ]
                )
            if id(child) not in sizes:
                stack.append((child, False))


_EXPANSION_MESSAGE = (
    f"aliases here expand to more than {MAX_EXPANDED_NODES:,} values (nested '*' references, "
    "a 'billion laughs'); write the values out, or use fewer levels of aliases"
)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def finding_at(node: yaml.Node, name: str, finding_id: str, message: str) -> Finding:
    mark = node.start_mark
    return Finding(finding_id, message, file=name, line=mark.line + 1, col=mark.column + 1)
