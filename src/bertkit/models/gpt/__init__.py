"""GPT-2 (Radford et al., 2019): its configuration and the decoder-only language model.

Its public names import from the package itself (`from bertkit.models.gpt import ...`), each module on first use.
"""

from bertkit.utils.lazy import lazy_modules

__getattr__, __dir__ = lazy_modules(__name__, ("configuration", "modeling"))
