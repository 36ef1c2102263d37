"""Image previews, as a workflow asks for them: ``preview: {max: 12, size: 96}`` (every step),
``preview: false`` (none), or per step (``preview: {ReviewSplit: {max: 6}, Train: false}``);
``field`` picks the note field shown (default: the files a ``dump_fn`` wrote when they are
images, else the first image in each note), and time and size bounds keep a preview from
blocking or filling memory (``timeout_s``, ``image_timeout_s``, ``max_megapixels``).

The settings are fixed at definition time and travel on each ``StepPlan``; the thumbnails are
made by ``store/previews.py`` where the notes already are (a step's outputs), never by a second
read of the day's data.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Tuple

from ..model.workflow import Workflow, WorkflowError
from .refs import resolve_refs, step_refs_of

_KEYS = ("max", "size", "caption", "field", "timeout_s", "image_timeout_s", "max_megapixels")
_SECONDS = ("timeout_s", "image_timeout_s", "max_megapixels")  # positive numbers


@dataclass(frozen=True)
class PreviewSettings:
    """How a step's pins are previewed: up to ``max`` thumbnails (0: none), ``size`` pixels on the
    longest side, captioned with the note fields ``caption`` (empty: the note's last short
    scalar fields), in one metadata entry of at most ``max_bytes``. ``field``: the note field
    whose images are shown (empty: the image files the step's ``dump_fn`` wrote, when it wrote
    any, else each note's first image). At most ``timeout_s`` seconds per pin's preview and
    ``image_timeout_s`` per image (an image over it is skipped, with a sentence); an image
    file over ``max_megapixels`` (after a JPEG's reduced decoding) is skipped undecoded."""

    max: int = 12
    size: int = 96
    caption: Tuple[str, ...] = ()
    max_bytes: int = 64 * 1024
    field: str = ""
    timeout_s: float = 10.0
    image_timeout_s: float = 3.0
    max_megapixels: float = 50.0

    @property
    def on(self) -> bool:
        return self.max > 0


OFF = PreviewSettings(max=0)


def resolve_previews(
    workflow: Workflow, setting: Any, step_names: Mapping[str, str]
) -> Dict[str, PreviewSettings]:
    """Node id -> the step's ``PreviewSettings`` (steps left out get the defaults). ``setting``:
    ``None``/``True`` (defaults), ``False`` (off), or a mapping of the keys of ``_KEYS``
    (every step) and step names (step name, label, class name or node id) to ``False``, ``True``
    or such a mapping. Anything else is a load error naming the option."""
    if setting is None or setting is True:
        return {}
    if setting is False:
        return {n.id: OFF for n in workflow.steps()}
    if not isinstance(setting, Mapping):
        raise WorkflowError(
            workflow.source,
            [
                f"preview must be true, false or a mapping ({', '.join(_KEYS)}, steps), "
                f"got {setting!r}"
            ],
        )
    base = _settings(workflow, "preview", {k: v for k, v in setting.items() if k in _KEYS})
    out = {n.id: base for n in workflow.steps()}
    refs = resolve_refs((step_refs_of(n, step_names[n.id]), n) for n in workflow.steps())
    for ref, given in setting.items():
        if ref in _KEYS:
            continue
        node = refs.get(str(ref))
        if node is None:
            steps = ", ".join(step_names[n.id] for n in workflow.steps())
            raise WorkflowError(
                workflow.source,
                [
                    f"preview names step {ref!r}, which is not in the workflow (steps: {steps}); "
                    f"its own keys are {', '.join(_KEYS)}"
                ],
            )
        where = f"preview[{ref!r}]"
        if given is False:
            out[node.id] = OFF
        elif given is True:
            out[node.id] = base if base.on else PreviewSettings()
        elif isinstance(given, Mapping):
            out[node.id] = _settings(workflow, where, given, base if base.on else None)
        else:
            raise WorkflowError(
                workflow.source, [f"{where} must be true, false or a mapping, got {given!r}"]
            )
    return out


def _settings(
    workflow: Workflow, where: str, given: Mapping[str, Any], base: Optional[PreviewSettings] = None
) -> PreviewSettings:
    """``given`` (the keys of ``_KEYS``) over ``base`` (or the defaults), checked."""
    unknown = sorted(str(k) for k in given if k not in _KEYS)
    problems = (
        [f"{where} has unknown keys {unknown} (known: {', '.join(_KEYS)})"] if unknown else []
    )
    values: Dict[str, Any] = {}
    for key in ("max", "size"):
        if key in given:
            v = given[key]
            low, high = (0, 256) if key == "max" else (8, 1024)  # a preview, not a gallery
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
                problems.append(
                    f"{where}.{key} must be a whole number from {low} to {high}, got {v!r}"
                )
            else:
                values[key] = v
    for key in _SECONDS:
        if key in given:
            v = given[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                problems.append(f"{where}.{key} must be a number above 0, got {v!r}")
            else:
                values[key] = float(v)
    if "field" in given:
        v = given["field"]
        if not isinstance(v, str) or not v:
            problems.append(f"{where}.field must be a note field's name, got {v!r}")
        else:
            values["field"] = v
    if "caption" in given:
        v = given["caption"]
        v = [v] if isinstance(v, str) else v
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            problems.append(f"{where}.caption must be a field name or a list of them, got {v!r}")
        else:
            values["caption"] = tuple(v)
    if problems:
        raise WorkflowError(workflow.source, problems)
    return replace(base or PreviewSettings(), **values)
