"""Step docstrings as Dagster descriptions: Dagster renders Markdown, step docstrings are often
reStructuredText (``x``, :class:`X`, ``Example::`` blocks) and Google-style sections (``Args:``).

``to_markdown`` converts what docstrings commonly hold, without a dependency (Graphbook's own
editor does the same with its ``doc2md``); ``pin_docs`` reads the ``Outputs:`` section where a
step documents what each of its pins receives, e.g.::

    Outputs:
        confident: predictions at or above the threshold
        review: the rest, to check by hand
"""

from __future__ import annotations

import inspect
import re
from typing import Dict, List, Optional, Tuple

_LINK = re.compile(r"`([^`<>]+?)\s*<([^`<>]+)>`_{1,2}")
_ROLE = re.compile(r":(?:[A-Za-z][\w+.-]*:)?[A-Za-z][\w+.-]*:`([^`]+)`")
_LITERAL = re.compile(r"``(.+?)``")
_DIRECTIVE = re.compile(r"^\.\.\s+([\w-]+)::\s*(.*)$")
_CODE_DIRECTIVES = {"code", "code-block", "sourcecode", "testcode", "doctest"}
_ADMONITIONS = {
    "note": "Note",
    "warning": "Warning",
    "tip": "Tip",
    "important": "Important",
    "seealso": "See also",
    "caution": "Caution",
    "attention": "Attention",
}
_SECTIONS = {
    "args": "Parameters",
    "arguments": "Parameters",
    "parameters": "Parameters",
    "params": "Parameters",
    "outputs": "Outputs",
    "pins": "Outputs",
    "returns": "Returns",
    "yields": "Yields",
    "raises": "Raises",
    "attributes": "Attributes",
    "example": "Example",
    "examples": "Examples",
    "note": "Note",
    "notes": "Notes",
}
_ENTRY_SECTIONS = {"Parameters", "Outputs", "Raises", "Attributes"}
_PIN_SECTION = "Outputs"
_ENTRY = re.compile(r"^([\w.*]+)\s*(\([^)]*\))?\s*:\s*(.*)$")


def _code(text: str) -> str:
    """``text`` as a Markdown code span (longer fences when it holds backticks)."""
    text = text.strip()
    if "`" not in text:
        return f"`{text}`"
    return f"`` {text} ``"


def _role(match: re.Match[str]) -> str:
    body = match.group(1).strip()
    shown = re.match(r"^(.*?)\s*<[^<>]+>$", body)  # :class:`the model <pkg.Model>`
    if shown and shown.group(1):
        return _code(shown.group(1))
    if body.startswith("~"):  # :class:`~pkg.mod.Model` shows Model
        body = body[1:].rsplit(".", 1)[-1]
    return _code(body.lstrip("!"))


def inline(text: str) -> str:
    """RST inline markup in one line of prose as Markdown (links, roles, literals)."""
    text = _LINK.sub(lambda m: f"[{m.group(1)}]({m.group(2)})", text)
    text = _ROLE.sub(_role, text)
    return _LITERAL.sub(lambda m: _code(m.group(1)), text)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block(lines: List[str], start: int, base: int) -> Tuple[List[str], int]:
    """The lines indented deeper than ``base`` from ``start`` (blank lines inside kept)."""
    end = start
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > base):
        end += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return lines[start:end], end


def _fence(block: List[str], language: str = "") -> List[str]:
    while block and not block[0].strip():
        block = block[1:]
    if not block:
        return []
    cut = min(_indent(line) for line in block if line.strip())
    return [f"```{language}", *[line[cut:] for line in block], "```"]


def _section(line: str) -> Optional[str]:
    stripped = line.strip()
    if not stripped.endswith(":") or stripped.endswith("::"):
        return None
    return _SECTIONS.get(stripped[:-1].strip().lower())


def _entries(block: List[str]) -> List[Tuple[str, str, str]]:
    """``name (type): text`` entries of a Google-style section, continuation lines joined."""
    out: List[Tuple[str, str, str]] = []
    base = min((_indent(line) for line in block if line.strip()), default=0)
    for line in block:
        if not line.strip():
            continue
        match = _ENTRY.match(line.strip()) if _indent(line) == base else None
        if match:
            out.append((match.group(1), match.group(2) or "", match.group(3).strip()))
        elif out:
            name, kind, text = out[-1]
            out[-1] = (name, kind, f"{text} {line.strip()}".strip())
        else:
            out.append(("", "", line.strip()))
    return out


def _entry_md(name: str, kind: str, text: str) -> str:
    if not name:
        return f"- {inline(text)}"
    return f"- **{name}**{f' {kind}' if kind else ''}: {inline(text)}"


def to_markdown(doc: Optional[str]) -> str:
    """A docstring (RST inline markup, literal blocks, directives, Google sections) as Markdown."""
    lines = inspect.cleandoc(doc or "").splitlines()
    out: List[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line.strip())
        section = _section(line) if _indent(line) == 0 else None
        if directive:
            name, arg = directive.group(1).lower(), directive.group(2).strip()
            block, i = _block(lines, i + 1, _indent(line))
            block = [b for b in block if not re.match(r"^\s*:[\w-]+:", b)]  # directive options
            if name in _CODE_DIRECTIVES:
                out.extend(_fence(block, arg))
            elif name in _ADMONITIONS:
                text = " ".join(b.strip() for b in [arg, *block] if b.strip())
                out.append(f"**{_ADMONITIONS[name]}:** {inline(text)}")
            continue  # other directives (toctree, versionadded, ...) say nothing to a reader
        if section:
            block, i = _block(lines, i + 1, 0)
            if out and out[-1]:
                out.append("")  # else Markdown continues the list or paragraph above
            out.extend([f"**{section}**", ""])
            if section in _ENTRY_SECTIONS:
                out.extend(_entry_md(*entry) for entry in _entries(block))
            elif section.startswith("Example"):
                out.extend(_fence(block, "python"))
            else:
                out.extend(inline(b.strip()) for b in block)
            out.append("")
            continue
        if line.rstrip().endswith("::"):
            prose = line.rstrip()[:-2].rstrip()
            if prose:
                out.append(inline(prose) + ("" if prose.endswith(":") else ":"))
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            block, i = _block(lines, j, _indent(line)) if j < len(lines) else ([], j)
            out.extend(["", *_fence(block)])
            continue
        out.append(inline(line))
        i += 1
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


def summary(doc: Optional[str]) -> str:
    """The docstring's first paragraph, in Markdown, on one line."""
    text = inspect.cleandoc(doc or "")
    first = text.split("\n\n", 1)[0]
    return " ".join(inline(line.strip()) for line in first.splitlines() if line.strip())


def pin_docs(doc: Optional[str]) -> Dict[str, str]:
    """What the docstring's ``Outputs:`` (or ``Pins:``) section says of each pin, in Markdown."""
    lines = inspect.cleandoc(doc or "").splitlines()
    for i, line in enumerate(lines):
        if _indent(line) == 0 and _section(line) == _PIN_SECTION:
            block, _ = _block(lines, i + 1, 0)
            return {name: inline(text) for name, _, text in _entries(block) if name}
    return {}
