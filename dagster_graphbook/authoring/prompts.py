"""Graphbook's prompt builders, so node files that import them still load.

Prompt steps themselves (human in the loop) cannot run under Dagster; workflows with them fail
at load time with a message saying so.
"""

from __future__ import annotations

from typing import Any, List, Optional

from .log import transform_json_log


def _prompt(kind: str, data: Any, msg: str, show_images: bool, default: Any, **extra: Any) -> dict:
    return {
        "type": kind,
        "note": transform_json_log(data),
        "msg": msg,
        "show_images": show_images,
        "def": default,
        **extra,
    }


def none() -> dict:
    return {"type": None}


def bool_prompt(
    data: Any,
    *,
    msg: str = "Continue?",
    style: str = "yes/no",
    default: bool = False,
    show_images: bool = False,
) -> dict:
    return _prompt("bool", data, msg, show_images, default, style=style)


def selection_prompt(
    data: Any,
    choices: List[str],
    *,
    msg: str = "Select an option:",
    default: Optional[Any] = None,
    show_images: bool = False,
    multiple_allowed: bool = False,
) -> dict:
    return _prompt(
        "selection",
        data,
        msg,
        show_images,
        default,
        choices=choices,
        multiple_allowed=multiple_allowed,
    )


def text_prompt(
    data: Any, *, msg: str = "Enter text:", default: str = "", show_images: bool = False
) -> dict:
    return _prompt("string", data, msg, show_images, default)


def number_prompt(
    data: Any, *, msg: str = "Enter a number:", default: float = 0.0, show_images: bool = False
) -> dict:
    return _prompt("number", data, msg, show_images, default)


def dict_prompt(
    data: Any,
    *,
    msg: str = "Enter a dictionary:",
    default: Optional[dict] = None,
    show_images: bool = False,
) -> dict:
    return _prompt("dict", data, msg, show_images, default or {})


def list_prompt(
    data: Any,
    type: str = "string",
    *,
    msg: str = "Enter a list:",
    default: Optional[list] = None,
    show_images: bool = False,
) -> dict:
    return _prompt("list", data, msg, show_images, default or [], list_type=type)
