"""The model core: each family's configuration beside its model (bert/, gpt/, vit/, seq2seq/, rnn_lm/), the maths
they share (functional.py), the one base every model stands on (pretrained.py), checkpoints with Hugging Face's
names (checkpoint.py), generation, the NumPy reference forward passes, and the registry of families by model_type."""
