"""What every command module shares."""


class UserError(Exception):
    """A problem with what the user asked for; printed as one line, exit status 2."""


def shorten(text: str, width: int = 70) -> str:
    """One line of at most `width` characters, with an ellipsis when cut."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 1] + "…"


def _model_help() -> str:
    from bertkit.data.sources import model_names

    return f"a model directory, or a model name ({', '.join(model_names())})"


MODEL_HELP = _model_help()  # what every --model takes (bertkit.data.sources.resolve_model)
