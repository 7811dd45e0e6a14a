"""The number formats a model can compute in, each named here and only here: torch's names, and the short ones the
command line offers. Nothing here imports torch, so a command's parser can offer them (bertkit.inference.precision
converts a model between them)."""

FLOAT32, BFLOAT16, INT8 = "float32", "bfloat16", "int8"
FP32, BF16 = "fp32", "bf16"
DTYPES = {FP32: FLOAT32, FLOAT32: FLOAT32, BF16: BFLOAT16, BFLOAT16: BFLOAT16, INT8: INT8}  # any name -> torch's
DTYPE_CHOICES = (FP32, BF16, INT8)  # --dtype of predict, evaluate and encode; serve adds auto
