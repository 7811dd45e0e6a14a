"""What each training command is configured with, declared once, a module per command (and `common` for what
they share).

A field is the Python API's name, type and default; its metadata (`option(...)`) is the help line and,
where it differs from the name, the flag the command line shows. `bertkit.cli.options` builds every
training command's arguments from these classes, so the CLI and `pretrain(PretrainOptions(...))` cannot
disagree on a default. Nothing here imports torch: the command line reads these classes at start-up.
"""

from bertkit.pipelines.options.common import (
    CORPUS_NAMES,
    DATASET_NAMES,
    IMAGE_DATA_NAMES,
    MAX_SEQUENCE_LENGTH,
    MODEL_NAMES,
    PRESET_NAMES,
    TRANSLATION_DATA_NAMES,
    TrainingOptions,
    check_encoding,
    check_epochs,
    check_sequence_length,
    native_bf16,
)
from bertkit.pipelines.options.demo import DEFAULT_DEMO_MINUTES, DemoOptions
from bertkit.pipelines.options.finetune import FinetuneOptions, MineOptions
from bertkit.pipelines.options.pretrain import (
    MASKINGS,
    MAX_EVAL_FRACTION,
    PrepareOptions,
    PretrainOptions,
    recipe_options,
    recipe_values,
)
from bertkit.pipelines.options.seq2seq import (
    CORPUS_HELP,
    LMOptions,
    SummarizationOptions,
    TranslationOptions,
    parse_pair,
)
from bertkit.pipelines.options.vision import POSITION_KINDS, VisionTrainOptions, check_image_size

__all__ = ["CORPUS_HELP", "CORPUS_NAMES", "DATASET_NAMES", "DEFAULT_DEMO_MINUTES", "IMAGE_DATA_NAMES", "MASKINGS",
           "MAX_EVAL_FRACTION", "MAX_SEQUENCE_LENGTH", "MODEL_NAMES", "POSITION_KINDS", "PRESET_NAMES",
           "TRANSLATION_DATA_NAMES", "DemoOptions", "FinetuneOptions", "LMOptions", "MineOptions", "PrepareOptions",
           "PretrainOptions", "SummarizationOptions", "TrainingOptions", "TranslationOptions", "VisionTrainOptions",
           "check_encoding", "check_epochs", "check_image_size", "check_sequence_length", "native_bf16", "parse_pair",
           "recipe_options", "recipe_values"]
