"""The Vision Transformer (Dosovitskiy et al., 2020): its configuration and models.

Its public names import from the package itself (`from bertkit.models.vit import ...`), each module on first use.
"""

from bertkit.utils.lazy import lazy_modules

__getattr__, __dir__ = lazy_modules(__name__, ("configuration", "modeling"))
