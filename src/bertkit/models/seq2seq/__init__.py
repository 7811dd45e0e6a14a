"""The encoder–decoder models: the Transformer of Vaswani et al., the RNNs it replaced, and a pretrained BERT
encoder under a Transformer decoder.

Its public names import from the package itself (`from bertkit.models.seq2seq import ...`), each module on first use.
"""

from bertkit.utils.lazy import lazy_modules

__getattr__, __dir__ = lazy_modules(__name__, ("configuration", "layers", "encoder_decoder", "transformer", "rnn",
                                               "bert_encoder"))
