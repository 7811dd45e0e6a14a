"""What every explain topic returns, and the small helpers they share for tables and pictures."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bertkit.errors import InputError

DEFAULT_OUT = Path("runs/explain")


@dataclass
class Explanation:
    """One experiment's outcome: the claim it tests, its numbers, the text `bertkit explain` prints, its pictures."""

    topic: str
    claim: str
    numbers: dict[str, Any]
    text: str
    pictures: list[Path] = field(default_factory=list)

    def report(self) -> str:
        """The claim, the numbers as text, and where the pictures went."""
        lines = [f"== {self.topic}: {self.claim}", "", self.text.rstrip(), ""]
        lines += [f"picture  {p}" for p in self.pictures]
        return "\n".join(lines).rstrip() + "\n"


class PictureWriter:
    """Saves a topic's figures as OUT/NAME.FORMAT, or does nothing when `out` is None (numbers only)."""

    def __init__(self, out: str | os.PathLike | None, fmt: str = "png") -> None:
        fmt = fmt.lower().lstrip(".")
        if fmt not in ("png", "svg"):
            raise InputError(f"picture format must be 'png' or 'svg', got {fmt!r}")
        self.out = None if out is None else Path(out)
        self.fmt = fmt
        self.paths: list[Path] = []

    def __bool__(self) -> bool:
        return self.out is not None

    def save(self, name: str, make_figure) -> Path | None:
        """Build the figure (only if pictures are wanted) with `make_figure()` and save it as NAME."""
        if self.out is None:
            return None
        from bertkit.pictures.figures import save_figure

        path = save_figure(make_figure(), self.out / f"{name}.{self.fmt}")
        self.paths.append(path)
        return path

    def plot(self, name: str, kind: str, *args: Any, **kwargs: Any) -> Path | None:
        """`save(name, ...)` of the figure `bertkit.pictures.figures.<kind>(*args, **kwargs)`, e.g. kind "line_plot"."""
        def make_figure():
            from bertkit.pictures import figures

            return getattr(figures, kind)(*args, **kwargs)

        return self.save(name, make_figure)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one thread inside the block: on a topic's tiny matrices more threads only add waiting for each
    other (many times slower on a busy machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], digits: int = 3, sci: bool = True) -> str:
    """A plain-text table with right-aligned columns; floats to `digits` decimals (tiny or huge ones as 1.2e-07)."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            tiny_or_huge = v != 0 and (abs(v) < 10 ** -digits or abs(v) >= 1e6)
            return f"{v:.{digits}e}" if sci and tiny_or_huge else f"{v:.{digits}f}"
        return str(v)

    cells = [[str(h) for h in header]] + [[cell(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells)


def matrix_text(matrix, digits: int = 3, indent: str = "  ") -> str:
    """A matrix with one row per line, fixed decimals, signs aligned: '[ 0.841  0.540 ...]'."""
    rows = [[f"{float(v):{digits + 3}.{digits}f}".replace("-0.000", " 0.000") for v in row] for row in matrix]
    return "\n".join(f"{indent}[{' '.join(row)}]" for row in rows)
