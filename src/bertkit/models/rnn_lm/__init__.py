"""The recurrent language model: embedding -> RNN, LSTM or GRU layers -> next-token logits.

Its public names import from the package itself (`from bertkit.models.rnn_lm import ...`), each module on first use.
"""

from bertkit.utils.lazy import lazy_modules

__getattr__, __dir__ = lazy_modules(__name__, ("configuration", "modeling"))
