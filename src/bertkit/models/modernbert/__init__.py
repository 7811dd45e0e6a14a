"""ModernBERT (Warner et al., 2024): the encoder with rotary positions, a gated feed-forward, pre-norm without
biases and local / global attention; its configuration and models.

Its public names import from the package itself (`from bertkit.models.modernbert import ...`), each module on first
use.
"""

from bertkit.utils.lazy import lazy_modules

__getattr__, __dir__ = lazy_modules(__name__, ("configuration", "modeling"))
