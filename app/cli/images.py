"""Images on the command line: `hearth run … --image FILE` and `/image FILE` in `hearth chat`, checked before
the model loads (or before the turn is sent); and the vision projector a GGUF loads with from the command line,
as the app finds it: kept with a library model, or beside the file (LM Studio's layout)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.formats import GGUF

if TYPE_CHECKING:
    from app.cli.context import CliContext
    from app.core.engines.base import ImageInput
    from app.core.library.store import LocalModel


def add_image_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--image",
        action="append",
        type=Path,
        metavar="FILE",
        help="an image for a model that can see (PNG, JPEG, WebP, GIF, BMP); repeat it for more",
    )


def read_images(paths: list[Path]) -> list[ImageInput]:
    """The files as a message's images, before its text; raises ImageRejected naming a file that will not do."""
    from app.core.chat.attachments import read_image_file

    return [read_image_file(path.expanduser()).image for path in paths]


def chat_image(path: str, say: Callable[[str], None]) -> list[ImageInput]:
    """`/image FILE` in `hearth chat`: the image for the next message, or none; `say` tells the user which."""
    from app.core.errors import HearthError

    try:
        image = read_images([Path(path)])
    except HearthError as exc:
        say(f"error: {exc}")
        return []
    say(f"(image {Path(path).name} goes with your next message)")
    return image


def projector_for(ctx: CliContext, name: str, path: Path, fmt: str) -> Path | None:
    """The vision projector a GGUF loads with: the one its library entry keeps, else one beside the file."""
    if fmt != GGUF:
        return None
    from app.core.library.projectors import projector_beside, projector_of

    model = library_entry(ctx, name, path)
    return projector_of(model) if model is not None else projector_beside(path)


def library_entry(ctx: CliContext, name: str, path: Path) -> LocalModel | None:
    """The library's entry for the model a command loads (by its name, else its file), if it has one."""
    library = ctx.open_library()
    try:
        return library.find(name) or library.find(str(path))
    finally:
        library.close()
