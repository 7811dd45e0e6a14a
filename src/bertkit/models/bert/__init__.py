"""BERT (Devlin et al., 2018): its configuration, the encoder and its task heads.

Its public names import from the package itself (`from bertkit.models.bert import ...`), each module on first use.
"""

from bertkit.utils.lazy import lazy_modules

__getattr__, __dir__ = lazy_modules(__name__, ("configuration", "modeling", "heads", "unilm"))
